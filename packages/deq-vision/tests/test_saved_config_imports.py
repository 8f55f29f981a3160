"""A run folder cannot run code through its config.json: a solver named there by import path
(``deq.solver="payload:Evil"``) is imported neither by ``evaluate`` nor by ``train --resume``, although ``python -m``
puts the working directory (here the run folder, holding payload.py) on sys.path: one line, exit status 2. A module
the user allows with ``--trust-solver`` is read; an import path given on the command line for a new run is the user's
own choice and needs no option, and the module it names is the one installed, never a file of the run folder."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import learnable_images, write_cifar_folder
from deq_core.train.testing.faults import (
    PAYLOAD_MODULE,
    TRUSTED_SOLVER_MODULE,
    check_export_trust,
    check_installed_solver_module,
    plant_solver_path,
    python_module,
)
from deq_vision import train

ARGS = ["--config", "tiny-mdeq"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    images, labels = learnable_images(96)
    folder = tmp_path_factory.mktemp("vision") / "cifar"
    write_cifar_folder(folder, images, labels)
    return str(folder)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory, data_dir: str) -> Path:
    run = tmp_path_factory.mktemp("vision") / "run"
    assert train.main([*ARGS, "--data-dir", data_dir, "--output-dir", str(run), "run.stop_after=2"]) == 0
    return run


def _commands(data_dir: str) -> dict[str, list[str]]:
    return {
        "evaluate": ["deq_vision.evaluate", "--checkpoint", ".", "--data-dir", data_dir, "--no-sweep"],
        "resume": ["deq_vision.train", *ARGS, "--data-dir", data_dir, "--output-dir", ".", "--resume"],
    }


@pytest.mark.parametrize(("command", "field"), [("evaluate", "solver"), ("evaluate", "backward_solver"),
                                                ("resume", "solver")])  # fmt: skip
def test_a_solver_import_path_in_config_json_runs_no_code(
    stopped_run: Path, data_dir: str, tmp_path: Path, command: str, field: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    plant_solver_path(run, field)
    module, *args = _commands(data_dir)[command]
    done = python_module(module, *args, cwd=run)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"python -m {module}: error: config.json: deq.{field} is the import path "
                           "'payload:Evil', and a saved config imports no module"), line  # fmt: skip
    assert line.endswith("if you trust the module 'payload', add --trust-solver payload."), line
    assert not (run / "ran").exists()


def test_a_trusted_user_solver_module_is_read(tmp_path: Path, data_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_solvers", raising=False)
    user_solver = "deq.solver=my_solvers:Relaxed"
    # a new run: the import path on the command line is the user's choice (docs/custom-solver.md)
    new_run = [*ARGS, "--data-dir", data_dir, "--output-dir", str(tmp_path / "run"), "run.stop_after=2", user_solver]
    assert train.main(new_run) == 0
    sys.modules.pop("my_solvers", None)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["deq"]["solver"] == "my_solvers:Relaxed"
    (tmp_path / "imported").unlink()
    trust = ["--trust-solver", "my_solvers"]
    resume = ["--data-dir", data_dir, "--output-dir", "run", "--resume", user_solver, *trust]
    done = python_module("deq_vision.train", *ARGS, *resume, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resumed from" in done.stdout and "final (step 4)" in done.stdout
    assert (tmp_path / "imported").exists()
    (tmp_path / "imported").unlink()
    done = python_module("deq_vision.evaluate", "--checkpoint", "run", "--data-dir", data_dir, "--no-sweep", *trust,
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("eval (") and (tmp_path / "imported").exists()
    (tmp_path / "imported").unlink()
    check_export_trust("deq_vision.export", tmp_path)  # export reads config.json too


@pytest.fixture(scope="module")
def user_solver_run(tmp_path_factory: pytest.TempPathFactory, data_dir: str) -> Path:
    """A stopped run whose config names the solver my_solvers:Relaxed (the module imported from site/ beside it)."""
    root = tmp_path_factory.mktemp("vision")
    (root / "site").mkdir()
    (root / "site" / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root / "site"))
        patch.delitem(sys.modules, "my_solvers", raising=False)
        run = ["--data-dir", data_dir, "--output-dir", str(root / "run"), "run.stop_after=2"]
        assert train.main([*ARGS, *run, "deq.solver=my_solvers:Relaxed"]) == 0
        sys.modules.pop("my_solvers", None)
    return root / "run"


@pytest.mark.parametrize("command", ["evaluate", "resume"])
def test_a_trusted_module_is_the_installed_one_never_a_file_of_the_run_folder(
    user_solver_run: Path, data_dir: str, tmp_path: Path, command: str
) -> None:
    run, site = tmp_path / "run", tmp_path / "site"
    shutil.copytree(user_solver_run, run)
    site.mkdir()
    commands = _commands(data_dir)
    commands["resume"].append("deq.solver=my_solvers:Relaxed")
    check_installed_solver_module(commands[command], run, site)


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_a_data_folder_as_working_directory_runs_no_module_of_its_own(
    stopped_run: Path, tmp_path: Path, command: str
) -> None:
    """Training, or evaluation with its sweep, run in the CIFAR folder (``--data-dir .``), which ``python -m`` puts
    first on sys.path: a matplotlib.py planted there is never imported by the plot at the end."""
    images, labels = learnable_images(96)
    cifar = write_cifar_folder(tmp_path / "cifar", images, labels).parent
    (cifar / "matplotlib.py").write_text(PAYLOAD_MODULE)
    out = tmp_path / "out"
    if command == "train":
        done = python_module(
            "deq_vision.train", *ARGS, "steps=2", "--data-dir", ".", "--output-dir", str(out), cwd=cifar
        )
        figure = out / "training.png"
    else:
        done = python_module("deq_vision.evaluate", "--checkpoint", str(stopped_run), "--data-dir", ".", "--max-steps",
                             "2", "--limit", "8", "--output-dir", str(out), cwd=cifar)  # fmt: skip
        figure = out / "hard_stop.png"
    assert done.returncode == 0, done.stderr
    assert figure.is_file() and not (cifar / "ran").exists()
