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

from deq_core.train.testing.faults import (
    PAYLOAD_MODULE,
    TRUSTED_SOLVER_MODULE,
    check_installed_solver_module,
    plant_solver_path,
    python_module,
    set_saved_setting,
)
from deq_toy import train

ARGS = ["--config", "synthetic-tiny", "--no-progress"]
COMMANDS = {
    "evaluate": ["deq_toy.evaluate", "--checkpoint", "."],
    "resume": ["deq_toy.train", *ARGS, "--output-dir", ".", "--resume"],
}


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("toy") / "run"
    assert train.main([*ARGS, "--output-dir", str(run), "--stop-after", "10"]) == 0
    return run


@pytest.mark.parametrize(("command", "field"), [("evaluate", "solver"), ("evaluate", "backward_solver"),
                                                ("resume", "solver")])  # fmt: skip
def test_a_solver_import_path_in_config_json_runs_no_code(stopped_run: Path, tmp_path: Path, command, field) -> None:
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    plant_solver_path(run, field)
    done = python_module(*COMMANDS[command], cwd=run)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"python -m {COMMANDS[command][0]}: error: "), line
    assert f"deq.{field} is the import path 'payload:Evil', and a saved config imports no module" in line
    assert line.endswith("if you trust the module 'payload', add --trust-solver payload."), line
    assert not (run / "ran").exists()


def test_an_eval_solver_import_path_in_config_json_runs_no_code(stopped_run: Path, tmp_path: Path) -> None:
    """run.eval_solver may name a user's solver as deq.solver may, so a saved one is refused the same way."""
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    (run / "payload.py").write_text(PAYLOAD_MODULE)
    set_saved_setting(run, "run.eval_solver", "payload:Evil")
    done = python_module(*COMMANDS["evaluate"], cwd=run)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "run.eval_solver is the import path 'payload:Evil', and a saved config imports no module" in line
    assert line.endswith("if you trust the module 'payload', add --trust-solver payload."), line
    assert not (run / "ran").exists()


def test_a_trusted_user_solver_module_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_solvers", raising=False)
    user_solver = "deq.solver=my_solvers:Relaxed"
    # a new run: the import path on the command line is the user's choice (docs/custom-solver.md)
    assert train.main([*ARGS, "--output-dir", str(tmp_path / "run"), "--stop-after", "10", user_solver]) == 0
    sys.modules.pop("my_solvers", None)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["deq"]["solver"] == "my_solvers:Relaxed"
    (tmp_path / "imported").unlink()
    trust = ["--trust-solver", "my_solvers"]
    done = python_module("deq_toy.train", *ARGS, "--output-dir", "run", "--resume", user_solver, *trust, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resumed from" in done.stdout and (tmp_path / "run" / "results.json").is_file()
    assert (tmp_path / "imported").exists()
    (tmp_path / "imported").unlink()
    done = python_module("deq_toy.evaluate", "--checkpoint", "run", *trust, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mse" in json.loads(done.stdout) and (tmp_path / "imported").exists()


def test_reproduce_reads_back_a_user_solver_run_only_when_trusted(tmp_path: Path) -> None:
    (tmp_path / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    tiny = ["epochs=1", "n_train=32", "n_valid=16", "n_test=16", "hidden=8", "deq.max_iter=5", "eval_every=2"]
    argv = ["arithmetic", "--output-dir", "out", "--no-progress", "--runs", "arith-deq", *tiny,
            "deq.solver=my_solvers:Relaxed", "deq.solver_options=damping=0.8"]  # fmt: skip
    # the new run trains and its row is written: its import path is on the command line, the user's own choice
    done = python_module("deq_toy.reproduce", *argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = tmp_path / "out" / "table.md"
    assert "| GRU-DEQ | 4 ops |" in table.read_text()
    table.unlink()
    # the run finished: the table reads its saved config.json, which may name that module only when trusted
    done = python_module("deq_toy.reproduce", *argv, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("python -m deq_toy.reproduce: error: "), line
    assert line.endswith("if you trust the module 'my_solvers', add --trust-solver my_solvers."), line
    assert not table.exists()
    done = python_module("deq_toy.reproduce", *argv, "--trust-solver", "my_solvers", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| GRU-DEQ | 4 ops |" in table.read_text()


@pytest.fixture(scope="module")
def user_solver_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped run whose config names the solver my_solvers:Relaxed (the module imported from site/ beside it)."""
    root = tmp_path_factory.mktemp("toy")
    (root / "site").mkdir()
    (root / "site" / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root / "site"))
        patch.delitem(sys.modules, "my_solvers", raising=False)
        run = [*ARGS, "--output-dir", str(root / "run"), "--stop-after", "10", "deq.solver=my_solvers:Relaxed"]
        assert train.main(run) == 0
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
