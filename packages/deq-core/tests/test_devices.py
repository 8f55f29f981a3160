"""``deq_core.train.devices``: the benchmarks' ``--device`` option, and its one-line errors on any machine (CUDA and
MPS are reported absent through monkeypatching, so the tests do not depend on this machine's hardware)."""

from __future__ import annotations

import argparse

import pytest
import torch

from deq_core.train.devices import add_device_argument, resolve_device


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench")
    add_device_argument(parser)
    return parser.parse_args(argv)


def test_cpu_is_the_default() -> None:
    assert parse([]).device == torch.device("cpu")
    assert parse(["--device", "cpu"]).device == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "mps"])
def test_a_missing_device_is_a_one_line_error(no_gpu: None, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=f"device '{name}' is not available.*use --device cpu"):
        resolve_device(name)
    with pytest.raises(SystemExit) as exit_info:
        parse(["--device", name])
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
def test_an_unknown_name(name: str) -> None:
    with pytest.raises(ValueError, match="unknown device .*use cpu, cuda, cuda:N or mps"):
        resolve_device(name)


def test_an_unsupported_type() -> None:
    with pytest.raises(ValueError, match="unsupported device type 'meta'"):
        resolve_device("meta")
