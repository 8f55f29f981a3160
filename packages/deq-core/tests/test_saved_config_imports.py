"""A config read from a file imports no module the user did not allow: a solver named by import
path in a saved config (``deq.solver="pkg.module:Class"``) is refused with one line naming the path and the option
that allows it, before anything is imported, unless its module is trusted; built-in shorthands are always read. A
trusted module is the one installed in the environment, never a file of the run folder of the same name. The task
packages' tests run the same through ``python -m ... evaluate`` / ``train --resume`` in a run folder."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

import deq_core
from deq_core.train.cli import add_trust_option, module_name, run_training_cli, training_parser
from deq_core.train.deq_config import DEQConfig, deq_section
from deq_core.train.errors import UsageError
from deq_core.train.run_config import check_resume_config, config_from_dict, load_config, save_config
from deq_core.train.testing.faults import PAYLOAD_MODULE, TRUSTED_SOLVER_MODULE
from deq_core.train.trust import (
    UntrustedImportError,
    check_import_paths,
    import_path_fields,
    import_trusted,
    leave_run_folder,
)

MODULE = "saved_config_payload"  # written into tmp_path by the fixture; importing it writes MARKER
MARKER = "imported.txt"


@dataclasses.dataclass(frozen=True)
class _TaskConfig:
    lr: float = 1e-3
    deq: DEQConfig = deq_section(max_iter=8)


@pytest.fixture
def payload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module MODULE on sys.path that records its import in tmp_path/MARKER and defines a valid solver, Relaxed."""
    source = f"""
import dataclasses
from pathlib import Path

import deq_core

Path({str(tmp_path / MARKER)!r}).write_text("imported")


@dataclasses.dataclass(frozen=True)
class Relaxed(deq_core.Solver):
    damping: float = 0.5

    def init(self, z, fz, g, loop):
        return None

    def step(self, state, z, fz, g, loop):
        return deq_core.Step(z + self.damping * g, state, temporary=True)
"""
    (tmp_path / f"{MODULE}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield tmp_path / MARKER
    sys.modules.pop(MODULE, None)


def test_the_solver_fields_are_marked_as_import_paths():
    assert import_path_fields(DEQConfig) == ("solver", "backward_solver")
    assert import_path_fields(_TaskConfig) == ()


@pytest.mark.parametrize("field", ["solver", "backward_solver"])
def test_an_untrusted_import_path_is_refused_before_it_is_imported(payload: Path, field: str):
    values = {"lr": 0.1, "deq": {field: f"{MODULE}:Relaxed"}}
    with pytest.raises(UntrustedImportError) as info:
        config_from_dict(_TaskConfig, values)
    message = str(info.value)
    assert message == (
        f"deq.{field} is the import path '{MODULE}:Relaxed', and a saved config imports no module the command line "
        f"does not allow; if you trust the module '{MODULE}', add --trust-solver {MODULE}."
    )
    assert isinstance(info.value, UsageError) and isinstance(info.value, ValueError)
    with pytest.raises(UntrustedImportError):  # another module trusted is not this one
        config_from_dict(_TaskConfig, values, trusted_modules=["other", f"{MODULE}.sub"])
    assert not payload.exists() and MODULE not in sys.modules


def test_a_trusted_module_is_imported_and_built(payload: Path):
    cfg = config_from_dict(_TaskConfig, {"deq": {"solver": f"{MODULE}:Relaxed"}}, trusted_modules=[MODULE])
    assert cfg.deq.solver == f"{MODULE}:Relaxed" and payload.exists()
    assert type(cfg.deq.layer().solver).__name__ == "Relaxed"


def test_built_in_names_and_solvers_need_no_trust():
    for name in ("anderson", "broyden", "fixed_point"):
        cfg = config_from_dict(_TaskConfig, {"deq": {"solver": name, "backward_solver": name}})
        assert cfg.deq.solver == name and cfg.deq.backward_solver == name
    with pytest.raises(ValueError, match="unknown solver 'newton'"):  # an unknown name imports nothing either
        config_from_dict(_TaskConfig, {"deq": {"solver": "newton"}})


def test_the_flat_layout_of_earlier_versions_is_checked_too(payload: Path):
    with pytest.raises(UntrustedImportError, match=f"deq.solver is the import path '{MODULE}:Relaxed'"):
        config_from_dict(_TaskConfig, {"lr": 0.1, "solver": f"{MODULE}:Relaxed"})
    assert not payload.exists()


def test_load_config_and_the_resume_check_name_the_file(payload: Path, tmp_path: Path):
    run = tmp_path / "run"
    save_config(_TaskConfig(), run, "task")
    data = json.loads((run / "config.json").read_text())
    data["config"]["deq"]["solver"] = f"{MODULE}:Relaxed"
    (run / "config.json").write_text(json.dumps(data))
    for read in (lambda: load_config(run, _TaskConfig), lambda: check_resume_config(run, _TaskConfig())):
        with pytest.raises(UntrustedImportError) as info:
            read()
        assert str(info.value).startswith(f"{run / 'config.json'}: deq.solver is the import path ")
        assert "\n" not in str(info.value)
        assert not payload.exists()
    with pytest.raises(ValueError, match=f"deq.solver: '{MODULE}:Relaxed' -> 'anderson'"):  # trusted: read, compared
        check_resume_config(run, _TaskConfig(), trusted_modules=[MODULE])
    assert payload.exists()


def test_a_config_built_from_the_command_line_may_name_a_user_solver(payload: Path):
    """The documented "write your own solver" path: an import path the user gives for a new run is imported."""
    cfg = DEQConfig(solver=f"{MODULE}:Relaxed")
    assert payload.exists() and type(cfg.layer().solver).__name__ == "Relaxed"


def test_check_import_paths_ignores_values_that_import_nothing():
    check_import_paths(DEQConfig, {"solver": 3, "backward_solver": None, "max_iter": "x:y"}, ())


def test_the_trust_option_takes_module_names():
    parser = argparse.ArgumentParser()
    add_trust_option(parser)
    assert parser.parse_args([]).trust_solver == []
    args = parser.parse_args(["--trust-solver", "a.b", "--trust-solver", "c"])
    assert args.trust_solver == ["a.b", "c"]
    assert training_parser("p", "d", ["x"], default="x").parse_args(["--trust-solver", "m"]).trust_solver == ["m"]
    assert module_name("pkg.mod_1") == "pkg.mod_1"
    with pytest.raises(argparse.ArgumentTypeError, match="give the module of the import path, 'pkg.mod', not"):
        module_name("pkg.mod:Cls")
    for bad in ("", "pkg..mod", "1pkg", "pkg/mod"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a module name"):
            module_name(bad)


def test_resolve_solver_in_python_still_imports_a_path():
    """Python code naming a solver by import path is the user's own code: deq_core.resolve_solver imports it."""
    assert deq_core.resolve_solver("deq_core:Anderson") == deq_core.Anderson()


SHADOWED = "shadowed_solvers"  # installed in tmp_path/site and planted in the run folder tmp_path/run


@pytest.fixture
def shadowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run folder tmp_path/run, first on sys.path (as the working directory of ``python -m``), holding
    SHADOWED.py that writes run/ran when imported; the module as installed is tmp_path/site/SHADOWED.py (a user's
    solver Relaxed, which writes site/imported), later on sys.path. Returns the run folder."""
    run, site = tmp_path / "run", tmp_path / "site"
    run.mkdir()
    site.mkdir()
    (run / f"{SHADOWED}.py").write_text(PAYLOAD_MODULE)
    (site / f"{SHADOWED}.py").write_text(TRUSTED_SOLVER_MODULE)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(run))
    monkeypatch.delitem(sys.modules, SHADOWED, raising=False)
    yield run
    sys.modules.pop(SHADOWED, None)


def test_a_trusted_module_is_the_installed_one_never_the_run_folders(shadowed: Path) -> None:
    site = shadowed.parent / "site"
    values = {"deq": {"solver": f"{SHADOWED}:Relaxed"}}
    cfg = config_from_dict(_TaskConfig, values, trusted_modules=[SHADOWED], run_dir=shadowed)
    assert type(cfg.deq.layer().solver).__name__ == "Relaxed"
    assert sys.modules[SHADOWED].__file__ == str(site / f"{SHADOWED}.py")
    assert (site / "imported").exists() and not (shadowed / "ran").exists()
    assert str(shadowed) not in sys.path  # the run folder stays off sys.path


def test_a_trusted_module_found_only_in_the_run_folder_is_refused(shadowed: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(shadowed / "sub"))  # an entry inside the run folder counts as the folder
    (shadowed / "sub").mkdir()
    (shadowed.parent / "site" / f"{SHADOWED}.py").unlink()
    importlib.invalidate_caches()
    for call in (lambda: import_trusted([SHADOWED], shadowed),
                 lambda: config_from_dict(_TaskConfig, {"deq": {"solver": f"{SHADOWED}:Relaxed"}}, [SHADOWED],
                                          run_dir=shadowed)):  # fmt: skip
        with pytest.raises(UntrustedImportError) as info:
            call()
        assert str(info.value) == (
            f"--trust-solver {SHADOWED}: the module {SHADOWED!r} is {shadowed / SHADOWED}.py, inside the run folder "
            f"{shadowed}, and a trusted module is the one installed in the environment, never a file of a run folder; "
            "install it, or put it on PYTHONPATH outside the run folder."
        )
    assert not (shadowed / "ran").exists() and SHADOWED not in sys.modules


def test_a_module_imported_from_the_run_folder_before_is_refused(shadowed: Path) -> None:
    importlib.import_module(SHADOWED)  # e.g. by a script run from the run folder
    with pytest.raises(UntrustedImportError, match=f"is {shadowed / SHADOWED}.py, inside the run folder"):
        import_trusted([SHADOWED], shadowed)


def test_the_training_command_line_imports_trusted_modules_before_the_config(shadowed: Path, capsys) -> None:
    """The config built from the command line (``deq.solver=MODULE:Class`` to resume a run) imports the installed
    module too: ``--trust-solver`` modules are imported first."""
    parser = training_parser("prog", "d", ["tiny"], default="tiny", threads=False)
    argv = ["--output-dir", str(shadowed), "--trust-solver", SHADOWED]
    imported = []
    configure = lambda args: imported.append(importlib.import_module(SHADOWED).__file__)  # noqa: E731
    assert run_training_cli(parser, argv, configure, lambda cfg, out, args: None) == 0
    assert imported == [str(shadowed.parent / "site" / f"{SHADOWED}.py")] and not (shadowed / "ran").exists()
    sys.modules.pop(SHADOWED)
    (shadowed.parent / "site" / f"{SHADOWED}.py").unlink()
    importlib.invalidate_caches()
    assert run_training_cli(parser, argv, configure, lambda cfg, out, args: None) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"prog: error: --trust-solver {SHADOWED}: the module ") and err.count("\n") == 1, err
    assert not (shadowed / "ran").exists()


LATE = "late_import_payload"  # a module the tools import late (as matplotlib for the plot at the end of training)


def test_a_module_imported_late_is_never_read_from_the_run_folder(shadowed: Path, capsys) -> None:
    """The run folder, first on sys.path as the working directory of ``python -m``, holds LATE.py; a module of that
    name imported after the command line started (matplotlib, when training ends) is not read from there: the run
    folder is off sys.path from then on, whether it is the working directory or on PYTHONPATH."""
    (shadowed / f"{LATE}.py").write_text(PAYLOAD_MODULE)
    (shadowed / "sub").mkdir()
    sys.path.insert(1, str(shadowed / "sub"))  # an entry inside the run folder (PYTHONPATH=RUN/sub)
    parser = training_parser("prog", "d", ["tiny"], default="tiny", threads=False)
    found = []

    def train(cfg, out, args):
        found.append(importlib.util.find_spec(LATE))

    assert run_training_cli(parser, ["--output-dir", str(shadowed)], lambda args: None, train) == 0
    assert found == [None] and not (shadowed / "ran").exists()
    assert str(shadowed) not in sys.path and str(shadowed / "sub") not in sys.path
    assert str(shadowed.parent / "site") in sys.path  # outside the run folder: kept


def test_reading_a_saved_config_takes_its_run_folder_off_sys_path(shadowed: Path) -> None:
    """evaluate and export read the run's config first: the run folder leaves sys.path then."""
    config_from_dict(_TaskConfig, {"deq": {"solver": "anderson"}}, run_dir=shadowed)
    assert str(shadowed) not in sys.path and str(shadowed.parent / "site") in sys.path


def test_the_environment_kept_in_a_run_folder_stays_on_sys_path(shadowed: Path, monkeypatch) -> None:
    """A virtual environment inside the run folder is the user's installation, not the run's data: its folders stay."""
    env = shadowed / ".venv"
    (env / "site-packages").mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(env))
    monkeypatch.syspath_prepend(str(env / "site-packages"))
    assert leave_run_folder(shadowed) == [str(shadowed)]
    assert str(env / "site-packages") in sys.path and str(shadowed) not in sys.path


def test_a_run_folder_inside_the_environment_still_leaves_sys_path(shadowed: Path, monkeypatch) -> None:
    """A run folder written under the virtual environment's own folder (a test runner's temporary folder there) is
    still the run's data: its entry leaves ``sys.path``."""
    monkeypatch.setattr(sys, "prefix", str(shadowed.parent))
    assert leave_run_folder(shadowed) == [str(shadowed)]
    assert str(shadowed) not in sys.path
