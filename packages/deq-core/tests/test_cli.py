"""The shared ``train`` command line (``deq_core.train.cli``): options, the default output folder, threads, and
one-line errors with exit status 2 for bad settings and for a UsageError raised while training."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import ExampleConfig
from deq_core.train.cli import run_training_cli, training_parser, usage_error
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
