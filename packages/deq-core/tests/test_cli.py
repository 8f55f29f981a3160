"""The shared ``train`` command line (``deq_core.train.cli``): options, the default output folder, threads, and
one-line errors with exit status 2 for bad settings and for a UsageError raised while training; the benchmarks'
``--device`` option and its one-line errors on any machine (CUDA and MPS are reported absent through monkeypatching,
so the tests do not depend on this machine's hardware)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import pytest
import torch

from conftest import ExampleConfig
from deq_core.train.cli import (
    add_device_argument,
    leave_working_directory,
    resolve_device,
    run_training_cli,
    training_parser,
    usage_error,
)
from deq_core.train.errors import UsageError
from deq_core.train.overrides import apply_overrides


def _parser(default: str | None = "small", threads: bool = True):
    parser = training_parser("prog", "Train.", ["small", "large"], default=default, threads=threads)
    parser.add_argument("--data-dir", type=Path, default=None)  # a task's own option
    return parser


def _configure(args):
    return apply_overrides(ExampleConfig(), args.overrides)


def test_options_and_default_output_folder():
    calls = []
    code = run_training_cli(_parser(), ["lr=0.5", "--data-dir", "d"], _configure, lambda *a: calls.append(a))
    (config, output_dir, args), = calls  # fmt: skip
    assert code == 0 and config.lr == 0.5 and output_dir == Path("runs") / "small" and args.data_dir == Path("d")
    run_training_cli(_parser(), ["--config", "large", "--output-dir", "out", "--resume"], _configure,
                     lambda *a: calls.append(a))  # fmt: skip
    assert calls[1][1] == Path("out") and calls[1][2].resume and calls[1][2].config == "large"
    with pytest.raises(SystemExit):  # no default: --config is required
        _parser(default=None).parse_args([])
    assert not hasattr(_parser(threads=False).parse_args([]), "threads")


def test_threads_are_set(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    run_training_cli(_parser(), ["--threads", "3"], _configure, lambda *a: None)
    run_training_cli(_parser(), [], _configure, lambda *a: None)
    assert seen == [3]


@pytest.mark.parametrize("argv", [["lr=fast"], ["no_such_key=1"]])
def test_bad_settings_are_one_line_with_status_2(argv, capsys):
    code = run_training_cli(_parser(), argv, _configure, lambda *a: pytest.fail("trained with a bad setting"))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("prog: error: ") and err.count("\n") == 1


def test_usage_error_while_training_is_one_line_with_status_2(capsys):
    def train(*args):
        raise UsageError("no data in d: put train.txt there")

    code = run_training_cli(_parser(), [], _configure, train)
    assert code == 2 and capsys.readouterr().err == "prog: error: no data in d: put train.txt there\n"


def test_usage_error_prints_one_line_and_returns_2(capsys):
    assert usage_error("python -m deq_x.evaluate", FileNotFoundError("runs/x has no checkpoint")) == 2
    assert usage_error("prog", "--threads must be >= 1.") == 2
    assert capsys.readouterr().err == (
        "python -m deq_x.evaluate: error: runs/x has no checkpoint\nprog: error: --threads must be >= 1.\n"
    )


MARKER_MODULE = "from pathlib import Path\nPath(__file__).with_name('ran').touch()\n"


@pytest.fixture
def working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder that is the working directory, first on sys.path as ``python -m`` puts it, holding a
    ``late_module.py`` that marks when it runs and the user's own ``my_trusted.py``."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "late_module.py").write_text(MARKER_MODULE)
    (folder / "my_trusted.py").write_text("VALUE = 1\n")
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    for name in ("late_module", "my_trusted"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return folder


def test_a_module_imported_late_is_never_read_from_the_working_directory(working_folder: Path) -> None:
    """The trusted modules are imported first (the user's own, in the working directory outside the run folder),
    then the working directory leaves sys.path: a module imported later (matplotlib for a plot, inside torch) is never
    a file of the folder a command runs in, a data folder or a download."""
    leave_working_directory(["my_trusted"], working_folder.parent / "run")
    assert sys.modules["my_trusted"].__file__ == str(working_folder / "my_trusted.py")
    assert str(working_folder) not in sys.path
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("late_module")
    assert not (working_folder / "ran").exists()


def test_the_training_command_line_leaves_the_working_directory_after_the_config(working_folder: Path) -> None:
    """A new run's config is built (it imports the solver the command line names) before the working directory
    leaves sys.path, and the training runs without it."""
    seen = []

    def configure(args):
        seen.append(str(working_folder) in sys.path)
        return _configure(args)

    def train(config, output_dir, args):
        seen.append(str(working_folder) in sys.path)
        importlib.import_module("late_module")

    with pytest.raises(ModuleNotFoundError):
        run_training_cli(_parser(), ["--data-dir", "."], configure, train)
    assert seen == [True, False] and not (working_folder / "ran").exists()


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def _parse_device(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench")
    add_device_argument(parser)
    return parser.parse_args(argv)


def test_device_cpu_is_the_default() -> None:
    assert _parse_device([]).device == torch.device("cpu")
    assert _parse_device(["--device", "cpu"]).device == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "mps"])
def test_a_missing_device_is_a_one_line_error(no_gpu: None, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=f"device '{name}' is not available.*use --device cpu"):
        resolve_device(name)
    with pytest.raises(SystemExit) as exit_info:
        _parse_device(["--device", name])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"bench: error: argument --device: device '{name}' is not available: " + (
        "this machine has no MPS backend; use --device cpu" if name == "mps" else
        "this machine has no CUDA GPU; use --device cpu"
    )  # fmt: skip


def test_a_gpu_index_beyond_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match=r"has 2 CUDA GPU\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("name", ["gpu", "cuda:x", ""])
def test_an_unknown_device_name(name: str) -> None:
    with pytest.raises(ValueError, match="unknown device .*use cpu, cuda, cuda:N or mps"):
        resolve_device(name)


def test_an_unsupported_device_type() -> None:
    with pytest.raises(ValueError, match="unsupported device type 'meta'"):
        resolve_device("meta")
