"""The ``--device`` option of the benchmark scripts: a device name checked against what this machine has."""

from __future__ import annotations

import argparse

import torch

__all__ = ["add_device_argument", "resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"`` -> a :class:`torch.device` that exists on this machine.

    Raises:
        ValueError: one line saying what is wrong and how to fix it: an unknown device name, a type other than cpu /
            cuda / mps, or a device this machine does not have (e.g. cuda without a GPU).
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {name!r}: use cpu, cuda, cuda:N or mps") from err
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device {name!r} is not available: this machine has no CUDA GPU; use --device cpu")
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {name!r} is not available: this machine has {count} CUDA GPU(s), cuda:0 to "
                             f"cuda:{count - 1}")  # fmt: skip
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {name!r} is not available: this machine has no MPS backend; use --device cpu")
        return device
    raise ValueError(f"unsupported device type {device.type!r}: use cpu, cuda, cuda:N or mps")


def _device_argument(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_device_argument(parser: argparse.ArgumentParser, default: str = "cpu") -> None:
    """Add ``--device NAME`` (default cpu), parsed by :func:`resolve_device`: a bad or missing device ends the script
    with argparse's one-line error and exit status 2."""
    parser.add_argument(
        "--device",
        type=_device_argument,
        default=resolve_device(default),
        metavar="NAME",
        help=f"where models and data live: cpu, cuda, cuda:N or mps (default {default})",
    )
