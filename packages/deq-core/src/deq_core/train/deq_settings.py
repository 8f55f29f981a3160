"""A training config's DEQ settings as the arguments of :class:`deq_core.DEQ`: :func:`deq_layer_settings`, with
solver options given as ``key=value`` strings read by :func:`parse_options`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

OPTION_FIELDS = (("solver_options", "solver"), ("backward_options", "backward_solver"))  # (options field, its method)


# Fields of a training config that are, under the same names, arguments of deq_core.DEQ.
_LAYER_FIELDS = ("solver", "max_iter", "tol", "stop_mode", "backward", "backward_solver", "backward_max_iter",
                 "backward_tol", "backward_stop_mode", "phantom_steps", "phantom_damping", "eval_max_iter", "eval_tol",
                 "jacobian_samples", "on_nonfinite")  # fmt: skip


def deq_layer_settings(config: Any) -> dict[str, Any]:
    """Keyword arguments of :class:`deq_core.DEQ` from the fields of ``config`` that have its argument names
    (``solver``, ``max_iter``, ..., ``eval_tol``; those it lacks keep the layer's defaults), with ``solver_options``
    and ``backward_options`` read from ``key=value`` strings by :func:`parse_options`."""
    has = {f.name for f in dataclasses.fields(config)}
    settings = {name: getattr(config, name) for name in _LAYER_FIELDS if name in has}
    for field_name, _ in OPTION_FIELDS:
        if field_name in has:
            settings[field_name] = parse_options(getattr(config, field_name), field_name)
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
