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

from conftest import write_tiny_corpus
from deq_core.train.testing.faults import (
    PAYLOAD_MODULE,
    TRUSTED_SOLVER_MODULE,
    check_export_trust,
    check_installed_solver_module,
    plant_solver_path,
    python_module,
)
from deq_lm.train import main

ARGS = ["--config", "tiny-deq-transformer"]
COMMANDS = {
    "evaluate": ["deq_lm.evaluate", "--checkpoint", ".", "--no-sweep"],
    "resume": ["deq_lm.train", *ARGS, "--output-dir", ".", "--resume"],
}


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("lm") / "run"
    assert main([*ARGS, "--output-dir", str(run), "run.stop_after=3"]) == 0
    return run


@pytest.mark.parametrize(("command", "field"), [("evaluate", "solver"), ("resume", "solver"),
                                                ("resume", "backward_solver")])  # fmt: skip
def test_a_solver_import_path_in_config_json_runs_no_code(stopped_run: Path, tmp_path: Path, command, field) -> None:
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    plant_solver_path(run, field)
    done = python_module(*COMMANDS[command], cwd=run)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"python -m {COMMANDS[command][0]}: error: config.json: deq.{field} is the import path "
                           "'payload:Evil', and a saved config imports no module"), line  # fmt: skip
    assert line.endswith("if you trust the module 'payload', add --trust-solver payload."), line
    assert not (run / "ran").exists()


def test_a_trusted_user_solver_module_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_solvers", raising=False)
    user_solver = "deq.solver=my_solvers:Relaxed"
    # a new run: the import path on the command line is the user's choice (docs/custom-solver.md)
    assert main([*ARGS, "--output-dir", str(tmp_path / "run"), "run.stop_after=3", user_solver]) == 0
    sys.modules.pop("my_solvers", None)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["deq"]["solver"] == "my_solvers:Relaxed"
    (tmp_path / "imported").unlink()
    trust = ["--trust-solver", "my_solvers"]
    done = python_module("deq_lm.train", *ARGS, "--output-dir", "run", "--resume", user_solver, *trust, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resumed from" in done.stdout and "final (step 6)" in done.stdout
    assert (tmp_path / "imported").exists()
    (tmp_path / "imported").unlink()
    done = python_module("deq_lm.evaluate", "--checkpoint", "run", "--no-sweep", *trust, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("test: loss ") and (tmp_path / "imported").exists()
    (tmp_path / "imported").unlink()
    check_export_trust("deq_lm.export", tmp_path)  # export reads config.json too


@pytest.fixture(scope="module")
def user_solver_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped run whose config names the solver my_solvers:Relaxed (the module imported from site/ beside it)."""
    root = tmp_path_factory.mktemp("lm")
    (root / "site").mkdir()
    (root / "site" / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root / "site"))
        patch.delitem(sys.modules, "my_solvers", raising=False)
        run = [*ARGS, "--output-dir", str(root / "run"), "run.stop_after=3", "deq.solver=my_solvers:Relaxed"]
        assert main(run) == 0
        sys.modules.pop("my_solvers", None)
    return root / "run"


@pytest.mark.parametrize("command", ["evaluate", "resume"])
def test_a_trusted_module_is_the_installed_one_never_a_file_of_the_run_folder(
    user_solver_run: Path, tmp_path: Path, command: str
) -> None:
    run, site = tmp_path / "run", tmp_path / "site"
    shutil.copytree(user_solver_run, run)
    site.mkdir()
    commands = {**COMMANDS, "resume": [*COMMANDS["resume"], "deq.solver=my_solvers:Relaxed"]}
    check_installed_solver_module(commands[command], run, site)


def test_a_data_folder_as_working_directory_runs_no_module_of_its_own(tmp_path: Path) -> None:
    """Training run in the corpus folder (``--data-dir .``), which ``python -m`` puts first on sys.path: a
    matplotlib.py planted there is never imported by the plot at the end of training."""
    corpus = write_tiny_corpus(tmp_path / "corpus")
    (corpus / "matplotlib.py").write_text(PAYLOAD_MODULE)
    args = ["--config", "tiny-lm-deq-transformer", "steps=2", "eval_every=2", "--data-dir", "."]
    done = python_module("deq_lm.train", *args, "--output-dir", str(tmp_path / "run"), cwd=corpus)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "training.png").is_file() and not (corpus / "ran").exists()
