"""Pieces every DEQ training script shares (used by deq-toy, deq-lm and deq-vision), standard library only:

- :class:`JacobianSchedule`: when to add the Jacobian regularizer and with which weight (probability p, weight
  gamma, gamma growing by a step every K steps), deterministic per step so that a resumed run draws the same.
- :class:`PretrainSchedule`: the unrolled (weight-tied) pretraining phase for the first N steps.
- :func:`jittered_max_iter`: a random forward iteration limit per step, deterministic per (seed, step).
- :func:`progress_enabled`: whether a training script shows its progress bar (main process, a terminal, and no
  ``TQDM_DISABLE``).
- :func:`apply_overrides`: ``key=value`` command-line overrides of a config dataclass, type-checked, with errors
  that list the valid keys.
- :class:`MetricsLog`: the ``metrics.jsonl`` file (one JSON object per line), appended and flushed line by line.
- :func:`markdown_table` and :class:`MarkdownReport`: the Markdown tables and reports of benchmarks and results;
  :func:`draw_solver_curves`: the NFE and residual panels of a training plot.
- :func:`check_choice`, :func:`check_at_least`, :func:`check_fraction` and :func:`check_deq_training`: validation of a
  config dataclass with messages that name the key and the valid values; ``check_deq_training`` checks the settings
  every DEQ training config shares (solvers, limits, tolerances, solver options, pretraining, Jacobian schedule,
  optimizer steps); :func:`parse_options` reads solver options given as ``key=value`` strings and
  :func:`deq_layer_settings` turns a config into the arguments of :class:`deq_core.DEQ`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import sys
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")


@dataclasses.dataclass(frozen=True)
class JacobianSchedule:
    """Jacobian regularization schedule (Bai, Koltun & Kolter 2021).

    Args:
        weight: gamma at step 0 (0 disables the regularizer).
        probability: on each step the loss is added with this probability.
        growth: added to the weight every ``every`` steps (0: constant weight).
        every: period of the growth, in steps (0: never grows).
        seed: seed of the per-step draws.
        stop: the regularizer is off (weight 0, never active) from this step on (None: never switched off).
    """

    weight: float = 0.0
    probability: float = 1.0
    growth: float = 0.0
    every: int = 0
    seed: int = 0
    stop: int | None = None

    def __post_init__(self) -> None:
        if self.weight < 0 or self.growth < 0:
            raise ValueError(f"Jacobian weight and growth must be >= 0, got {self.weight} and {self.growth}.")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"Jacobian probability must be in [0, 1], got {self.probability}.")
        if self.every < 0:
            raise ValueError(f"Jacobian growth period must be >= 0 steps, got {self.every}.")
        if self.stop is not None and self.stop < 0:
            raise ValueError(f"Jacobian stop step must be >= 0 (or None: never), got {self.stop}.")

    def weight_at(self, step: int) -> float:
        """gamma at ``step`` (0-based); 0 from ``stop`` on."""
        if self.stop is not None and step >= self.stop:
            return 0.0
        grown = self.growth * (step // self.every) if self.every > 0 else 0.0
        return self.weight + grown

    def active(self, step: int) -> bool:
        """Whether the regularizer is applied at ``step``: same answer for the same (seed, step), even after resume."""
        if self.weight_at(step) == 0.0 or self.probability == 0.0:
            return False
        if self.probability == 1.0:
            return True
        return random.Random(self.seed * 1_000_003 + step).random() < self.probability


@dataclasses.dataclass(frozen=True)
class PretrainSchedule:
    """Unrolled pretraining: for the first ``steps`` training steps, apply f ``depth`` times with ordinary backprop
    instead of solving (``DEQ(...)(f, z0, unroll=schedule.unroll_at(step))``)."""

    steps: int = 0
    depth: int = 2

    def __post_init__(self) -> None:
        if self.steps < 0 or self.depth < 1:
            raise ValueError(f"pretraining needs steps >= 0 and depth >= 1, got {self.steps} and {self.depth}.")

    def unroll_at(self, step: int) -> int | None:
        """The unroll depth at ``step``, or None once the DEQ solves for its fixed point."""
        return self.depth if step < self.steps else None


def jittered_max_iter(max_iter: int, jitter: int, seed: int, step: int) -> int:
    """The forward iteration limit of ``step``: uniform in [max_iter - jitter, max_iter], the same for the same
    (seed, step), so that a resumed run draws what an uninterrupted one would.

    Raises:
        ValueError: ``jitter`` < 0 or >= ``max_iter`` (the limit must stay >= 1).
    """
    if not 0 <= jitter < max_iter:
        raise ValueError(f"max_iter_jitter must be in [0, max_iter) = [0, {max_iter}), got {jitter}.")
    if jitter == 0:
        return max_iter
    return random.Random(seed * 7919 + step).randint(max_iter - jitter, max_iter)


def progress_enabled(is_main: bool, stream: typing.TextIO | None = None) -> bool:
    """Whether a training script should draw its progress bar (pass ``disable=not progress_enabled(...)`` to tqdm).

    False on every process but the main one, when the environment sets ``TQDM_DISABLE`` (to anything but "", "0",
    "false", "no" or "off"; tqdm itself ignores it once a script passes ``disable=``), and when ``stream`` (default
    ``sys.stderr``, where tqdm draws) is not a terminal, so that logs written to a file or a pipe hold no
    carriage-return redraws. Lines written with ``tqdm.write`` still appear.
    """
    if not is_main:
        return False
    if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def _coerce(text: str, kind: Any, key: str) -> Any:
    """Parse ``text`` as the type ``kind`` of config field ``key``."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if type(None) in options and text.lower() in ("none", "null"):
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(text, option, key)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError("; ".join(errors))
    if origin is typing.Literal:
        choices = typing.get_args(kind)
        for choice in choices:
            if str(choice) == text:
                return choice
        raise ValueError(f"{key} must be one of {list(choices)}, got {text!r}")
    if origin in (tuple, list):
        (item,) = typing.get_args(kind)[:1] or (str,)
        parts = [p for p in text.strip("()[]").split(",") if p.strip()]
        values = [_coerce(p.strip(), item, key) for p in parts]
        return tuple(values) if origin is tuple else values
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key} must be true or false, got {text!r}")
    if kind is int:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {text!r}") from None
        if not value.is_integer():
            raise ValueError(f"{key} must be an integer, got {text!r}")
        return int(value)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {text!r}") from None
    if kind is str:
        return text
    raise ValueError(f"{key} has type {kind} which cannot be set from the command line")


def apply_overrides(config: C, overrides: Sequence[str]) -> C:
    """Return a copy of the dataclass ``config`` with ``key=value`` overrides applied.

    Values are parsed by the field's annotated type (int, float, bool, str, Literal[...], Optional, tuple[...]).

    Raises:
        ValueError: malformed item, unknown key (the message lists the valid keys) or a value of the wrong type.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"apply_overrides needs a dataclass instance, got {type(config).__name__}.")
    hints = typing.get_type_hints(type(config))
    names = [f.name for f in dataclasses.fields(config)]
    changes: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form key=value (e.g. lr=3e-4).")
        if key not in names:
            raise ValueError(f"unknown config key {key!r}; valid keys: {', '.join(names)}.")
        changes[key] = _coerce(text.strip(), hints[key], key)
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]


class MetricsLog:
    """Append-only JSON-lines metrics file; each :meth:`write` is one line, flushed at once (safe to read while the
    run goes on, and nothing is lost when it crashes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record; tensors and numpy scalars are converted to Python numbers, NaN/Inf to strings."""
        line = json.dumps({k: _plain(v) for k, v in record.items()})
        with self.path.open("a") as fh:
            fh.write(line + "\n")

    def read(self) -> list[dict[str, Any]]:
        """All records written so far (an empty list when the file does not exist)."""
        return read_metrics(self.path)

    def line_count(self) -> int:
        """The number of complete lines written so far (saved with a checkpoint, for :meth:`resume_at`)."""
        return self.path.read_bytes().count(b"\n") if self.path.exists() else 0

    def resume_at(self, lines: int) -> bool:
        """Keep the first ``lines`` complete lines (those written before the checkpoint a run resumes from), so that
        a resumed run logs no line twice. Returns True when a last line cut short by a crash (the file did not end
        with a newline) was dropped."""
        text = self.path.read_text() if self.path.exists() else ""
        complete = text.split("\n")  # the last item is "" or a line cut short
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text("".join(line + "\n" for line in complete[:-1][:lines]))
        partial.replace(self.path)
        return complete[-1] != ""


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl file; raises ValueError naming the line when one is not valid JSON."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not valid JSON ({err.msg}).") from err
    return records


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item) and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def select(records: Iterable[dict[str, Any]], split: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` in the records of ``split`` that have it (for plots)."""
    steps, values = [], []
    for r in records:
        if r.get("split") == split and key in r and isinstance(r[key], (int, float)):
            steps.append(int(r["step"]))
            values.append(float(r[key]))
    return steps, values


def check_choice(config: Any, *keys: str) -> None:
    """Raise ValueError unless each field in ``keys`` holds one of the values of its ``Literal[...]`` annotation
    (a field annotated otherwise, e.g. a solver given as ``str``, is left to its own check)."""
    hints = typing.get_type_hints(type(config))
    for key in keys:
        if typing.get_origin(hints[key]) is not typing.Literal:
            continue
        choices = typing.get_args(hints[key])
        if getattr(config, key) not in choices:
            raise ValueError(f"{key} must be one of {list(choices)}, got {getattr(config, key)!r}.")


def check_at_least(config: Any, minimum: float, *keys: str) -> None:
    """Raise ValueError unless each field in ``keys`` is a number (not a bool) >= ``minimum``."""
    for key in keys:
        value = getattr(config, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise ValueError(f"{key} must be a number >= {minimum}, got {value!r}.")


def check_fraction(config: Any, *keys: str, closed: bool = True) -> None:
    """Raise ValueError unless each field in ``keys`` is in [0, 1] (``closed``) or [0, 1)."""
    for key in keys:
        value = getattr(config, key)
        if not (0.0 <= value <= 1.0 if closed else 0.0 <= value < 1.0):
            raise ValueError(f"{key} must be in [0, 1{']' if closed else ')'}, got {value}.")


# The settings a DEQ training config shares, by the check they need; fields a config lacks are skipped.
_CHOICES = ("solver", "backward_solver", "stop_mode", "backward", "mixed_precision")
_AT_LEAST_ONE = ("max_iter", "backward_max_iter", "pretrain_depth", "steps", "batch_size", "grad_accum",
                 "eval_every", "log_every", "keep_checkpoints")  # fmt: skip
_AT_LEAST_ZERO = ("max_iter_jitter", "pretrain_steps", "jac_weight", "jac_growth", "jac_every", "jac_stop",
                  "weight_decay", "warmup_steps", "grad_clip", "save_every", "seed", "stop_after")  # fmt: skip
_POSITIVE = ("lr", "tol", "backward_tol")
_OPTIONS = (("solver_options", "solver"), ("backward_options", "backward_solver"))  # (options field, its solver)
_POSITIVE_OR_NONE = ("eval_tol",)


def check_deq_training(config: Any) -> None:
    """Check the settings DEQ training configs share, those ``config`` has: solver and mode names (``Literal``
    fields), iteration limits and optimizer step counts >= 1, schedules and sizes >= 0, ``jac_prob`` in [0, 1],
    learning rate and tolerances > 0 (``eval_tol`` and ``eval_max_iter`` may be None), ``max_iter_jitter`` <
    ``max_iter`` and ``batch_size`` divisible by ``grad_accum``.

    Raises:
        ValueError: the first bad setting, with its key and the valid values.
    """
    has = {f.name for f in dataclasses.fields(config)}
    check_choice(config, *(k for k in _CHOICES if k in has))
    check_at_least(config, 1, *(k for k in _AT_LEAST_ONE if k in has))
    check_at_least(config, 0, *(k for k in _AT_LEAST_ZERO if k in has))
    if "jac_prob" in has:
        check_fraction(config, "jac_prob")
    for key in (k for k in _POSITIVE + _POSITIVE_OR_NONE if k in has):
        value = getattr(config, key)
        if not (value is None and key in _POSITIVE_OR_NONE) and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{key} must be > 0{' or None' if key in _POSITIVE_OR_NONE else ''}, got {value}.")
    if "eval_max_iter" in has and config.eval_max_iter is not None and config.eval_max_iter < 1:
        raise ValueError(f"eval_max_iter must be >= 1 or None, got {config.eval_max_iter}.")
    if {"max_iter", "max_iter_jitter"} <= has and config.max_iter_jitter >= config.max_iter:
        raise ValueError(f"max_iter_jitter must be < max_iter ({config.max_iter}), got {config.max_iter_jitter}.")
    if {"batch_size", "grad_accum"} <= has and config.batch_size % config.grad_accum:
        raise ValueError(f"batch_size ({config.batch_size}) must be divisible by grad_accum ({config.grad_accum}).")
    for options_field, solver_field in _OPTIONS:
        if solver_field in has:
            _check_solver(config, solver_field, options_field if options_field in has else None)


def _check_solver(config: Any, solver_field: str, options_field: str | None) -> None:
    """The solver named by ``solver_field`` (a built-in's shorthand or an import path) with the options of
    ``options_field`` (``key=value`` strings), checked by the solver itself; ValueError naming the field."""
    from ._solvers import resolve_solver

    try:
        resolve_solver(getattr(config, solver_field))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{solver_field}: {error}") from None
    if options_field is not None:
        options = parse_options(getattr(config, options_field), options_field)
        try:
            resolve_solver(getattr(config, solver_field), options)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{options_field}: {error}") from None


# Fields of a training config that are, under the same names, arguments of deq_core.DEQ, of deq_core.Implicit
# (with the prefix backward_) and of deq_core.Phantom (with the prefix phantom_).
_LAYER_FIELDS = ("max_iter", "tol", "stop_mode", "eval_max_iter", "eval_tol", "jacobian_samples", "on_nonfinite")
_IMPLICIT_FIELDS = ("max_iter", "tol", "stop_mode")
_PHANTOM_FIELDS = ("steps", "damping")


def deq_layer_settings(config: Any) -> dict[str, Any]:
    """Keyword arguments of :class:`deq_core.DEQ` from a config's flat fields (those it lacks keep the layer's
    defaults): ``solver`` with ``solver_options`` (``key=value`` strings, :func:`parse_options`) becomes the solver
    object; ``backward`` ("implicit", "phantom", "jfb") with ``backward_solver``, ``backward_options``,
    ``backward_max_iter``, ``backward_tol``, ``backward_stop_mode`` or ``phantom_steps``, ``phantom_damping`` becomes
    the backward strategy (``deq_core.Implicit`` / ``Phantom`` / ``JFB``)."""
    from . import JFB, Implicit, Phantom
    from ._solvers import resolve_solver

    has = {f.name for f in dataclasses.fields(config)}
    settings: dict[str, Any] = {name: getattr(config, name) for name in _LAYER_FIELDS if name in has}

    def options(field_name: str) -> dict[str, Any]:
        return parse_options(getattr(config, field_name), field_name) if field_name in has else {}

    if "solver" in has:
        settings["solver"] = resolve_solver(config.solver, options("solver_options"))
    backward = getattr(config, "backward", "implicit")
    if backward == "implicit":
        implicit = {k: getattr(config, f"backward_{k}") for k in _IMPLICIT_FIELDS if f"backward_{k}" in has}
        if "backward_solver" in has:
            implicit["solver"] = resolve_solver(config.backward_solver, options("backward_options"))
        settings["backward"] = Implicit(**implicit)
    elif backward == "phantom":
        settings["backward"] = Phantom(**{k: getattr(config, f"phantom_{k}") for k in _PHANTOM_FIELDS
                                          if f"phantom_{k}" in has})  # fmt: skip
    else:
        settings["backward"] = JFB() if backward == "jfb" else backward  # anything else: the layer's error
    return settings


def parse_options(items: Iterable[str], what: str = "options") -> dict[str, Any]:
    """``("memory=10", "beta=0.5", "line_search=true")`` -> ``{"memory": 10, "beta": 0.5, "line_search": True}``:
    solver options given as ``key=value`` strings (a config field set on the command line, e.g.
    ``backward_options=memory=10,line_search=true``). Values become int, float or bool when they read as one.

    Raises:
        ValueError: an item without ``=`` or a key given twice (``what`` names the field in the message).
    """
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = str(item).partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise ValueError(f"{what}: {item!r} is not of the form key=value (e.g. memory=10).")
        if key in options:
            raise ValueError(f"{what}: option {key!r} is given twice.")
        options[key] = _option_value(text)
    return options


def _option_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def draw_solver_curves(nfe_ax: Any, residual_ax: Any, records: Iterable[dict[str, Any]], split: str = "train") -> None:
    """Draw the DEQ panels of a training plot from metrics records: forward / backward NFE per step on ``nfe_ax`` and
    the mean forward residual (log scale) on ``residual_ax``. The axes are matplotlib ``Axes`` (this module does not
    import matplotlib: the caller creates the figure); records without DEQ statistics leave the panels empty."""
    records = list(records)
    for key, label in (("nfe_forward", "forward"), ("nfe_backward", "backward")):
        steps, values = select(records, split, key)
        if steps:
            nfe_ax.plot(steps, values, label=label)
    nfe_ax.set(title="NFE per step", xlabel="step")
    steps, values = select(records, split, "residual")
    if steps:
        residual_ax.plot(steps, values)
    residual_ax.set(title="forward residual (mean)", xlabel="step", yscale="log")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table: one header row, then one line per row (cells as ``str(cell)``), ending in a
    newline.

    Raises:
        ValueError: a row whose number of cells differs from the header's.
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a table row has {len(row)} cells for {len(header)} columns: {list(row)!r}.")
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"


class MarkdownReport:
    """Markdown text printed as it is added (so a long benchmark shows progress) and written to a file at the end."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, text: str = "") -> None:
        self.parts.append(text)
        print(text, flush=True)

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.add(markdown_table(header, rows))

    def text(self) -> str:
        return "\n".join(self.parts) + "\n"

    def write(self, path: str | Path | None, first_line: str = "") -> None:
        """Write the report to ``path`` (nothing when None), after ``first_line`` (e.g. the command) if given."""
        if path:
            head = f"{first_line}\n\n" if first_line else ""
            Path(path).write_text(head + self.text(), encoding="utf-8")
