"""The config file of a run, OUTPUT_DIR/config.json: {"name": preset name, "config": the resolved config, "resumed":
[changes, ...]}. :func:`save_config`, :func:`load_config`, :func:`config_changes`, :func:`check_resume_config`,
:func:`record_resume`."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypeVar

from .checkpoints import CONFIG_FILE, PARTIAL_SUFFIX, read_json
from .errors import UsageError

C = TypeVar("C")


def _as_dict(cfg: Any) -> dict[str, Any]:
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)


def _write_json_atomic(path: Path, data: Any) -> None:
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def save_config(cfg: Any, output_dir: str | Path, name: str, **extra: Any) -> Path:
    """Write OUTPUT_DIR/config.json with the preset name, the resolved config and ``extra`` top-level entries
    (e.g. ``data_dir``) for a new run; returns its path. Write it after the data were checked."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / CONFIG_FILE
    _write_json_atomic(path, {"name": name, "config": _as_dict(cfg), **extra})
    return path


def load_config(run_dir: str | Path, config_cls: type[C]) -> tuple[str, C]:
    """(preset name, config) saved in ``run_dir/config.json``, as an instance of the dataclass ``config_cls``. Keys
    the class no longer has are dropped, fields the file lacks take their defaults, and JSON lists become tuples
    (config dataclasses are frozen).

    Raises:
        FileNotFoundError: no config.json (not a run directory).
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} the output directory of a training run?")
    data = read_json(path)
    known = {f.name for f in dataclasses.fields(config_cls)}  # type: ignore[arg-type]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items() if k in known}
    return data.get("name", "?"), config_cls(**values)


def config_changes(saved: Any, current: Any, resumable: Collection[str] = ()) -> dict[str, tuple[Any, Any]]:
    """{key: (saved, current)} for settings that differ, except those listed in ``resumable`` (settings that may
    change when a run is resumed because they do not change what is computed)."""
    a, b = _as_dict(saved), _as_dict(current)
    return {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k) and k not in resumable}


class ResumeConfigError(UsageError, ValueError):
    """Resuming a run with a config that changes what it computes (a user error: the message lists the changes)."""


def check_resume_config(
    run_dir: str | Path, current: Any, resumable: Collection[str] = (), **extra: Any
) -> dict[str, tuple[Any, Any]]:
    """Before resuming in ``run_dir``: refuse a config that changes what the saved run computes; return the allowed
    changes ({key: (saved, current)} of ``resumable`` settings and of ``extra`` top-level entries such as
    ``data_dir``), for :func:`record_resume`. Nothing to check when the directory has no config.json.

    Raises:
        ResumeConfigError: (a ValueError) listing each refused key as ``key: saved -> current``.
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return {}
    _, saved = load_config(run_dir, type(current))
    changes = config_changes(saved, current, resumable)
    if changes:
        listed = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items())
        raise ResumeConfigError(
            f"--resume with a different config than the run in {run_dir}: {listed}. Resume with the run's settings, "
            "or train with the new ones in another --output-dir."
        )
    allowed = config_changes(saved, current)
    data = read_json(path)
    allowed.update({k: (data.get(k), v) for k, v in extra.items() if data.get(k) != v})
    return allowed


def record_resume(run_dir: str | Path, step: int, changes: dict[str, tuple[Any, Any]]) -> None:
    """Append ``{"step": step, "changes": {key: [saved, current]}}`` to the ``resumed`` list of config.json (the
    config itself stays the one the run started with). Nothing is written when there are no changes."""
    if not changes:
        return
    path = Path(run_dir) / CONFIG_FILE
    data = read_json(path)
    data.setdefault("resumed", []).append({"step": step, "changes": {k: list(v) for k, v in changes.items()}})
    _write_json_atomic(path, data)
