"""The config file of a run, OUTPUT_DIR/config.json: {"name": preset name, "config": the resolved config (nested
sections as objects), "resumed": [changes, ...]}. :func:`save_config`, :func:`load_config`, :func:`config_from_dict`,
:func:`replace_config`, :func:`resolve_key`, :func:`flat_dict`, :func:`config_changes`, :func:`check_resume_config`,
:func:`record_resume`.

Task configs are frozen dataclasses whose sections (e.g. ``deq``, a :class:`~deq_core.train.deq_config.DEQConfig`)
are nested dataclasses; a setting's name is its dotted path, ``deq.max_iter``, in changes, resume checks and on the
command line.

A config read from a file imports no module the user did not allow: :func:`config_from_dict` (and so
:func:`load_config` and :func:`check_resume_config`) refuses an import path naming a module outside
``trusted_modules`` before anything is built (:mod:`~deq_core.train.trust`)."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .checkpoints import CONFIG_FILE, latest_complete_checkpoint, read_json
from .errors import UsageError
from .files import write_json
from .state import CONFIG_COPY_FILE
from .trust import UntrustedImportError, check_import_paths, import_trusted

__all__ = [
    "RUN_RESUMABLE",
    "ResumeConfigError",
    "check_resume_config",
    "config_changes",
    "config_from_dict",
    "flat_dict",
    "load_config",
    "record_resume",
    "replace_config",
    "resolve_key",
    "save_config",
    "saved_run_config",
]

C = TypeVar("C")


def _as_dict(cfg: Any) -> dict[str, Any]:
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)


def save_config(cfg: Any, output_dir: str | Path, name: str, **extra: Any) -> Path:
    """Write OUTPUT_DIR/config.json with the preset name, the resolved config and ``extra`` top-level entries
    (e.g. ``data_dir``) for a new run (aside and renamed: :func:`~deq_core.train.files.write_json`); returns its
    path. Write it after the data were checked."""
    return write_json(Path(output_dir) / CONFIG_FILE, {"name": name, "config": _as_dict(cfg), **extra}, indent=2)


def saved_run_config(run_dir: str | Path) -> dict[str, Any]:
    """What ``run_dir/config.json`` holds or, when it is missing (deleted), the copy of it that the run's newest
    complete checkpoint keeps; empty when there is neither.

    Raises:
        CheckpointError: the file found is not JSON (e.g. nested too deep).
    """
    path = Path(run_dir) / CONFIG_FILE
    if path.is_file():
        return read_json(path)
    latest = latest_complete_checkpoint(run_dir)
    if latest is None or not (latest / CONFIG_COPY_FILE).is_file():
        return {}
    return read_json(latest / CONFIG_COPY_FILE)


def load_config(run_dir: str | Path, config_cls: type[C], trusted_modules: Collection[str] = ()) -> tuple[str, C]:
    """(preset name, config) saved in ``run_dir/config.json``, as an instance of the dataclass ``config_cls``
    (:func:`config_from_dict`: older flat layouts are read too; import paths only of ``trusted_modules``, each the
    module installed in the environment, never a file of ``run_dir``).

    Raises:
        FileNotFoundError: no config.json (not a run directory).
        UntrustedImportError: (a UsageError and ValueError) the config names a solver by import path whose module is
            not in ``trusted_modules``; nothing was imported.
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} the output directory of a training run?")
    data = read_json(path)
    try:
        return data.get("name", "?"), config_from_dict(config_cls, data["config"], trusted_modules, run_dir=run_dir)
    except UntrustedImportError as err:
        raise UntrustedImportError(f"{path}: {err}") from None


def _sections(config_cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The fields of the dataclass ``config_cls`` that are nested dataclasses (its sections), by name."""
    hints = typing.get_type_hints(config_cls)
    return {f.name: f for f in dataclasses.fields(config_cls) if dataclasses.is_dataclass(hints[f.name])}


def _section_default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def config_from_dict(
    config_cls: type[C], values: Mapping[str, Any], trusted_modules: Collection[str] = (), *,
    run_dir: str | Path | None = None,
) -> C:  # fmt: skip
    """An instance of the dataclass ``config_cls`` from ``values`` as saved by :func:`save_config` (sections as
    nested dicts). Keys the class no longer has are dropped, fields the dict lacks take their defaults (a section's
    missing keys: the section's defaults in ``config_cls``), and JSON lists become tuples (configs are frozen).
    Earlier, flatter layouts are read too: a section's keys found at the top level (run folders written before the
    task config had that section) are moved into it, and a section found as a plain value (``"model":
    "deq_transformer"``, the field the section replaced) becomes its ``name``.

    ``values`` are data (e.g. read from a file): a field that may hold an import path
    (:func:`~deq_core.train.trust.import_path_field`, e.g. ``deq.solver``) may name only a module of
    ``trusted_modules``, checked before anything is built, so that nothing else is imported. ``run_dir``: the run
    folder ``values`` were read from; a module they name is then imported as the environment has it, never from a
    file there (:func:`~deq_core.train.trust.import_trusted`).

    Raises:
        UntrustedImportError: (a UsageError and ValueError) an import path whose module is not in ``trusted_modules``,
            or (``run_dir``) whose only module is a file of the run folder.
    """
    sections = _sections(config_cls)
    names = {f.name for f in dataclasses.fields(config_cls)}  # type: ignore[arg-type]
    values = dict(values)
    for name, field in sections.items():
        nested = values.get(name)
        if nested is not None and not isinstance(nested, Mapping):
            nested = {"name": nested}  # the plain field this section replaced
        keys = {f.name for f in dataclasses.fields(_section_default(field))} - names
        flat = {k: values.pop(k) for k in list(values) if k in keys}
        if flat or nested is not None:
            values[name] = {**flat, **(nested or {})}
    trusted = frozenset(trusted_modules)
    named = check_import_paths(config_cls, values, trusted)
    for name, field in sections.items():
        if isinstance(values.get(name), Mapping):
            named += check_import_paths(type(_section_default(field)), values[name], trusted, prefix=f"{name}.")
    if run_dir is not None:
        import_trusted(named, run_dir)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in names:
            continue
        if key in sections and isinstance(value, Mapping):
            value = _replace_known(_section_default(sections[key]), value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return config_cls(**kwargs)


def _replace_known(section: Any, values: Mapping[str, Any]) -> Any:
    """``section`` (a dataclass instance) with the entries of ``values`` it has as fields (lists as tuples)."""
    known = {f.name for f in dataclasses.fields(section)}
    changes = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in known}
    return dataclasses.replace(section, **changes)


def resolve_key(config: Any, key: str, value: Any = None) -> str:
    """The full dotted name of the setting ``key`` of the dataclass instance ``config``, for a change to ``value``.

    A dotted name or a top-level field is returned as it is; a name that only one section has may be given without
    the section (``lr`` -> ``optim.lr``); a section's name given a plain value (not a dataclass or a mapping) names the
    section's ``name`` field (``model=deq_transformer`` -> ``model.name``).

    Raises:
        ValueError: a name no section has (with the closest valid names), or one several sections have (listing the
            dotted names to choose from).
    """
    if "." in key:
        return key
    sections = {name: getattr(config, name) for name in _sections(type(config))}
    if key in sections:
        plain = not (dataclasses.is_dataclass(value) or isinstance(value, Mapping))
        section_fields = [f.name for f in dataclasses.fields(sections[key])]
        if plain and "name" in section_fields:
            return f"{key}.name"
        if plain:
            raise ValueError(f"{key!r} is a config section: set one of its keys, {key}.{section_fields[0]}=...")
        return key
    top = [f.name for f in dataclasses.fields(config)]
    if key in top:
        return key
    owners = [name for name, sec in sections.items() if key in {f.name for f in dataclasses.fields(sec)}]
    if len(owners) == 1:
        return f"{owners[0]}.{key}"
    if owners:
        raise ValueError(f"{key!r} is in several sections: write {' or '.join(f'{o}.{key}' for o in owners)}.")
    every = list(flat_dict(config))
    leaf = {k: k.rpartition(".")[2] for k in every}
    close = set(difflib.get_close_matches(key, list(leaf.values()), n=3))
    hint = [k for k in every if leaf[k] in close]
    suggest = f" (did you mean {', '.join(hint)}?)" if hint else ""
    where = f"; sections: {', '.join(sections)}" if sections else ""
    raise ValueError(f"unknown config key {key!r}{suggest}{where}; valid keys: {', '.join(every)}.")


def replace_config(config: C, changes: Mapping[str, Any]) -> C:
    """A copy of the dataclass ``config`` with ``changes`` by dotted name: ``{"deq.max_iter": 12, "optim.lr": 1e-3}``
    (names resolved by :func:`resolve_key`: ``"lr"`` for ``"optim.lr"`` where only one section has it; a section may
    also be given whole). Values are not converted: use :func:`~deq_core.train.overrides.apply_overrides` for text
    from the command line.

    Raises:
        ValueError: a name the config has no field for (listing the valid names at that level).
    """
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        head, dot, rest = resolve_key(config, name, value).partition(".")
        if dot:
            nested.setdefault(head, {})[rest] = value
        else:
            top[head] = value
    for head, sub in nested.items():
        section = top.get(head, getattr(config, head, None))
        if not dataclasses.is_dataclass(section):
            raise ValueError(f"{head!r} is not a config section; sections: {', '.join(_sections(type(config)))}.")
        top[head] = replace_config(section, sub)
    valid = [f.name for f in dataclasses.fields(config)]  # type: ignore[arg-type]
    unknown = [k for k in top if k not in valid]
    if unknown:
        raise ValueError(f"unknown config key {unknown[0]!r}; valid keys: {', '.join(valid)}.")
    return dataclasses.replace(config, **top)  # type: ignore[type-var]


def flat_dict(values: Any, prefix: str = "") -> dict[str, Any]:
    """The settings of a config (a dataclass, or its dict) by dotted name: ``{"deq.max_iter": 12, "lr": 1e-3}``."""
    flat: dict[str, Any] = {}
    for key, value in (values if isinstance(values, Mapping) else _as_dict(values)).items():
        if isinstance(value, Mapping):
            flat.update(flat_dict(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_changes(saved: Any, current: Any, resumable: Collection[str] = ()) -> dict[str, tuple[Any, Any]]:
    """{dotted name: (saved, current)} for settings that differ, except those listed in ``resumable`` (settings
    that may change when a run is resumed because they do not change what is computed)."""
    a, b = flat_dict(saved), flat_dict(current)
    return {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k) and k not in resumable}


RUN_RESUMABLE = frozenset({"run.log_with", "run.project", "run.dist_timeout", "run.mixed_precision"})
"""Settings of the ``run`` section that may change when a run is resumed (:func:`check_resume_config` allows them
besides a task's ``resumable``): the trackers, their project, the process-group timeout, and ``run.mixed_precision``
as written (unset or set: the skeleton refuses a resume whose effective precision differs from the one the run
recorded)."""


class ResumeConfigError(UsageError, ValueError):
    """Resuming a run with a config that changes what it computes (a user error: the message lists the changes)."""


def check_resume_config(
    run_dir: str | Path,
    current: Any,
    resumable: Collection[str] = (),
    *,
    trusted_modules: Collection[str] = (),
    **extra: Any,
) -> dict[str, tuple[Any, Any]]:
    """Before resuming in ``run_dir``: refuse a config that changes what the saved run computes; return the allowed
    changes ({key: (saved, current)} of ``resumable`` settings, of :data:`RUN_RESUMABLE` and of ``extra`` top-level
    entries such as ``data_dir``), for :func:`record_resume`. Nothing to check when the directory has no
    config.json. The saved config is read by :func:`load_config` with ``trusted_modules``.

    Raises:
        ResumeConfigError: (a ValueError) listing each refused key as ``key: saved -> current``.
        UntrustedImportError: (a UsageError and ValueError) the saved config names a solver by import path whose
            module is not in ``trusted_modules``; nothing was imported.
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return {}
    _, saved = load_config(run_dir, type(current), trusted_modules)
    changes = config_changes(saved, current, {*resumable, *RUN_RESUMABLE})
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
    write_json(path, data, indent=2)
