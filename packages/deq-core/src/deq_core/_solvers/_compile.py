"""The optional compiled solver step (``compile_step=True``): the tensor work between two calls of f, run through
``torch.compile``.

f itself is never compiled: it runs eagerly between the compiled regions. What is compiled are the kernels a solver
routes through :meth:`deq_core.Loop.compiled` (Anderson: its history update and mixing, one kernel per iteration;
Broyden: its update, whose history grows by a row per iteration): pure tensor functions that take no Python number
that changes between iterations (those are passed as tensors). A kernel of fixed shapes compiles once per shape and
dtype (``dynamic=False``, the default); one whose shapes change between iterations asks for ``dynamic=True`` and
compiles a few times per solve (sizes 0 and 1 are specialized), not once per shape. Later solves reuse torch's
compile cache. The loop's own bookkeeping (residual norms, per-sample flags) stays eager: on the
CPU inductor's kernel for the norms was measured slower than ATen's (``benchmarks/compiled_step.py``).

Where torch.compile cannot run (no C++ compiler for inductor, an unsupported Python or platform), the first solve
with the flag checks it once on a tiny kernel, warns why, and runs eagerly (same results).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

Fn = TypeVar("Fn", bound=Callable[..., object])

# The torch.compile backend (tests replace it by a failing one to exercise the fallback).
BACKEND: str | Callable[..., object] = "inductor"


def _probe_kernel(x: Tensor) -> Tensor:
    return x * 2 + 1


def compiler_error() -> str | None:
    """None when torch.compile works here (checked on a tiny kernel), else a one-line reason."""
    return _probe(BACKEND)


@functools.cache
def _probe(backend: str | Callable[..., object]) -> str | None:
    """:func:`compiler_error` for one backend, worked out once per process: a fact of the installation, not a setting
    (a probe per solve cost 0.24 ms, a few percent of a 30-iteration solve of a small problem)."""
    try:
        torch.compile(_probe_kernel, backend=backend, dynamic=False, fullgraph=True)(torch.zeros(2))
    except Exception as error:  # no compiler, unsupported platform, backend failure: all mean "run eagerly"
        error = getattr(error, "inner_exception", None) or error  # a backend's failure, wrapped by dynamo
        first = (str(error).strip().splitlines() or [""])[0]
        return f"{type(error).__name__}: {first}"[:300]
    return None


@functools.cache
def _compiled(fn: Callable[..., object], dynamic: bool, backend: str | Callable[..., object]) -> Callable[..., object]:
    """``torch.compile(fn, dynamic=dynamic, fullgraph=True)``, one wrapper per kernel for the process (torch caches
    the compiled code itself; a new wrapper per solve only added the cost of making it)."""
    return torch.compile(fn, backend=backend, dynamic=dynamic, fullgraph=True)


class Compiler:
    """Compiles kernels for one solve (``compile_step=True``) or hands them back unchanged (eager).

    ``compiler(fn, dynamic)`` returns ``torch.compile(fn, dynamic=dynamic, fullgraph=True)``, or ``fn`` when compiling
    was not asked for or when torch.compile does not work here (then a RuntimeWarning says why, once per solve).
    Whether it works is only looked up when a solver first asks (``enabled``): a solve whose solver compiles nothing
    pays nothing for the flag.
    """

    __slots__ = ("requested", "_enabled")

    def __init__(self, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"compile_step must be True or False, got {enabled!r}.")
        self.requested = enabled
        self._enabled: bool | None = None if enabled else False

    @property
    def enabled(self) -> bool:
        """Whether kernels are compiled: asked for and torch.compile works here (warns once per solve if not)."""
        if self._enabled is None:
            self._enabled = _available()
        return self._enabled

    def __call__(self, fn: Fn, dynamic: bool = False) -> Fn:
        if not self.enabled:
            return fn
        return _compiled(fn, dynamic, BACKEND)  # type: ignore[return-value]


def _available() -> bool:
    reason = compiler_error()
    if reason is None:
        return True
    warnings.warn(
        f"compile_step=True: torch.compile does not work here ({reason}); the solver runs eagerly (same results, "
        "no speed-up). Install a C++ compiler for inductor (e.g. gcc) or pass compile_step=False to silence this.",
        RuntimeWarning,
        stacklevel=5,
    )
    return False
