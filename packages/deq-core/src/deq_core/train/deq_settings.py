"""A training config's DEQ settings as the arguments of :class:`deq_core.DEQ`: :func:`deq_layer_settings`, with
solver options given as ``key=value`` strings read by :func:`parse_options`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

OPTION_FIELDS = (("solver_options", "solver"), ("backward_options", "backward_solver"))  # (options field, its solver)


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
    from .. import JFB, Implicit, Phantom
    from .._solvers import resolve_solver

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
