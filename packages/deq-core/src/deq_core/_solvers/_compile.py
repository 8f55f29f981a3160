"""What the solve compiles, and how (``compile_step=True``, ``capture=True``).

- ``compile_step=True``, capturable solver (:attr:`deq_core.Solver.capturable`; see :mod:`._graph`): everything
  between two calls of f (the statistics of an iterate, the solver's step, the freezing of finished samples) is one
  graph, f runs eagerly. The graph is traced once per configuration with ``make_fx`` and compiled by inductor
  (:class:`_Traced`), then called directly. A call through ``torch.compile`` costs its guards (dynamo checks every
  input and every object the function read) and its frame evaluation: about 80 us per call of this graph on the
  CPU measured here, against 50 us called directly, and 20-30 us for a graph of 8 tensors, as much as the eager
  operations it replaces on small states (``benchmarks/compiled_step.py``). The configuration key names what the
  trace took as constant: the solver's settings, the stopping rule, the shapes, dtype and device, the solver state's
  structure, the autocast state; the inputs are the loop's own buffers.
- ``capture=True``: the iterations between two host checks are one ``torch.compile`` graph, f included, with dynamo's
  guards (f is the user's code, whose Python state the graph may depend on); ``mode="reduce-overhead"`` on CUDA (a CUDA
  graph, replayed). Each configuration (the above, f's code and the number of iterations) gets a code object of its
  own, so that a process with many never meets torch's limit of 8 recompilations per code object.
- Kernels a solver that is not capturable routes through :meth:`deq_core.Loop.compiled` (``compile_step=True``):
  ``torch.compile``, ``dynamic=True`` where the shapes change between iterations.

Where torch.compile cannot run (no C++ compiler for inductor, an unsupported Python or platform), the first solve
that asks checks it once on a tiny kernel, warns why, and runs eagerly (same results).
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Callable, Hashable
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


def _own_code(fn: Fn, tag: object) -> Fn:
    """A copy of the function ``fn`` with a code object of its own: torch keeps compiled graphs (and counts
    recompilations against its limit of 8) per code object, so each configuration of the loop's graphs gets its own."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{abs(hash(tag)) % 10**10}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)  # type: ignore


@functools.cache
def _compiled(fn: Callable[..., object], dynamic: bool, backend: str | Callable[..., object]) -> Callable[..., object]:
    """``torch.compile(fn, dynamic=dynamic, fullgraph=True)``, one wrapper per kernel for the process (torch caches
    the compiled code itself; a new wrapper per solve only added the cost of making it)."""
    return torch.compile(fn, backend=backend, dynamic=dynamic, fullgraph=True)


@functools.cache
def _compiled_graph(
    fn: Callable[..., object], key: Hashable, backend: str | Callable[..., object], mode: str | None
) -> Callable[..., object]:
    """``torch.compile(fn)`` for the configuration ``key`` (fixed shapes, one graph, dynamo's guards), on a code
    object of its own (:func:`_own_code`)."""
    return torch.compile(_own_code(fn, key), backend=backend, dynamic=False, fullgraph=True, mode=mode)


class _Traced:
    """A function of tensors only, traced once (``make_fx``, fake tensors: nothing runs) and compiled by inductor
    (``torch._inductor.compile``) at its first call, then let go; later calls run the compiled code directly, without
    dynamo's frame evaluation and guards (about 30 us of the 80 us a call of the same graph through ``torch.compile``
    took here). Valid for the inputs' shapes, dtypes and device of the first call and for everything else the
    function read as a constant: the caller's configuration key names all of it."""

    __slots__ = ("_fn", "_run")

    def __init__(self, fn: Callable[..., tuple[Tensor, ...]]) -> None:
        self._fn: Callable[..., tuple[Tensor, ...]] | None = fn
        self._run: Callable[..., tuple[Tensor, ...]] | None = None

    def __call__(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        if self._run is None:
            from torch._inductor import compile as inductor_compile
            from torch.fx.experimental.proxy_tensor import make_fx

            assert self._fn is not None
            try:
                graph = make_fx(self._fn, tracing_mode="fake")(*tensors)
            except Exception as error:  # a Python branch on a tensor's value, .item(), an op without a fake kernel
                first = (str(error).strip().splitlines() or [""])[0][:200]
                raise RuntimeError(
                    f"compile_step=True: the solver's step cannot be traced as one graph ({type(error).__name__}: "
                    f"{first}); make it a pure tensor function (see Solver.capturable) or pass compile_step=False."
                ) from None
            self._run, self._fn = inductor_compile(graph, list(tensors)), None  # keeps nothing of the first solve
        return self._run(*tensors)


# The traced graphs of the process, by configuration (compiled code is a cache of the installation, as torch's own).
_TRACED: dict[Hashable, _Traced] = {}


class Compiler:
    """What one solve compiles: nothing (eager), its step (``compile_step=True``) or its iterations with f
    (``capture=True``), falling back to eager where torch.compile does not work here.

    ``compiler(fn, dynamic)`` compiles a solver's kernel (:meth:`deq_core.Loop.compiled`); :meth:`graph` one of the
    loop's own graphs. Whether torch.compile works is only looked up when first needed (``enabled``): a solve that
    compiles nothing pays nothing for the flag.
    """

    __slots__ = ("requested", "capture", "_enabled")

    def __init__(self, enabled: bool, capture: bool = False) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"compile_step must be True or False, got {enabled!r}.")
        if not isinstance(capture, bool):
            raise TypeError(f"capture must be True or False, got {capture!r}.")
        self.requested = enabled or capture
        self.capture = capture
        self._enabled: bool | None = None if self.requested else False

    @property
    def enabled(self) -> bool:
        """Whether the solve compiles: asked for and torch.compile works here (warns once per solve if not)."""
        if self._enabled is None:
            self._enabled = _available("capture" if self.capture else "compile_step")
        return self._enabled

    def __call__(self, fn: Fn, dynamic: bool = False) -> Fn:
        if not self.enabled:
            return fn
        return _compiled(fn, dynamic, BACKEND)  # type: ignore[return-value]

    def graph(self, fn: Fn, key: Hashable, device: torch.device) -> Fn:
        """``fn``, one of the loop's graphs, compiled with ``torch.compile`` for the configuration ``key`` (a code
        object of its own, see :func:`_own_code`): on CUDA with ``capture=True`` with ``mode="reduce-overhead"`` (CUDA
        graphs)."""
        mode = "reduce-overhead" if self.capture and device.type == "cuda" else None
        return _compiled_graph(fn, key, BACKEND, mode)  # type: ignore[return-value]

    def traced(self, make: Callable[[], Callable[..., tuple[Tensor, ...]]], key: Hashable) -> _Traced:
        """The function of tensors ``make()`` returns, for the configuration ``key``, traced and compiled without
        dynamo (see :class:`_Traced`); ``make`` is only called the first time ``key`` is seen."""
        graph = _TRACED.get(key)
        if graph is None:
            graph = _TRACED[key] = _Traced(make())
        return graph


def _available(flag: str) -> bool:
    reason = compiler_error()
    if reason is None:
        return True
    warnings.warn(
        f"{flag}=True: torch.compile does not work here ({reason}); the solver runs eagerly (same results, "
        f"no speed-up). Install a C++ compiler for inductor (e.g. gcc) or pass {flag}=False to silence this.",
        RuntimeWarning,
        stacklevel=5,
    )
    return False
