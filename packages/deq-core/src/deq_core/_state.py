"""Conversion between user states (a tensor, or a tuple/list of tensors) and flat solver vectors.

Solvers work on one 2-D tensor of shape (B, D): B samples, D = the number of elements per sample summed over all
tensors of the state. This module checks states, flattens them and rebuilds them in the user's structure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

State = Tensor | tuple[Tensor, ...] | list[Tensor]


@dataclass(frozen=True)
class StateSpec:
    """Structure of a state: per-tensor shapes (batch first), dtypes, and whether it was a tensor, tuple or list."""

    kind: type  # Tensor, tuple or list
    shapes: tuple[torch.Size, ...]
    dtypes: tuple[torch.dtype, ...]
    device: torch.device

    @property
    def batch_size(self) -> int:
        return self.shapes[0][0]

    @property
    def sizes(self) -> tuple[int, ...]:
        """Elements per sample of each tensor."""
        return tuple(int(torch.Size(s[1:]).numel()) for s in self.shapes)

    @property
    def dim(self) -> int:
        """Elements per sample of the whole state."""
        return sum(self.sizes)


def solver_dtype(dtypes: Sequence[torch.dtype]) -> torch.dtype:
    """The dtype the solver computes in: float64 if any tensor is float64, else float32 (never lower)."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


def _describe(state: object) -> str:
    if isinstance(state, Tensor):
        return f"Tensor{tuple(state.shape)}"
    if isinstance(state, (tuple, list)):
        return type(state).__name__ + "(" + ", ".join(_describe(s) for s in state) + ")"
    return type(state).__name__


def state_spec(state: object, name: str = "z0") -> StateSpec:
    """Check that ``state`` is a floating tensor with a batch dimension, or a non-empty tuple/list of such tensors
    sharing the batch size and device; return its structure.

    Raises:
        TypeError: a non-tensor, non-floating or nested state.
        ValueError: an empty tuple, a 0-d tensor, mismatched batch sizes or devices.
    """
    if isinstance(state, Tensor):
        kind: type = Tensor
        tensors: Sequence[object] = (state,)
    elif isinstance(state, (tuple, list)):
        kind = type(state)
        tensors = state
        if len(tensors) == 0:
            raise ValueError(f"{name} is an empty {kind.__name__}; give a Tensor or a tuple/list of Tensors.")
    else:
        raise TypeError(
            f"{name} must be a torch.Tensor with the batch dimension first, or a tuple/list of such Tensors; "
            f"got {_describe(state)}."
        )
    for i, t in enumerate(tensors):
        where = name if kind is Tensor else f"{name}[{i}]"
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{where} must be a torch.Tensor, got {_describe(t)} (nested structures are not supported)."
            )
        if not t.is_floating_point():
            raise TypeError(f"{where} must be a floating-point tensor, got dtype {t.dtype}; convert it with .float().")
        if t.dim() == 0:
            raise ValueError(f"{where} is a 0-d tensor; states need a batch dimension first, e.g. z0.reshape(1, -1).")
    first = tensors[0]
    assert isinstance(first, Tensor)
    for i, t in enumerate(tensors):
        assert isinstance(t, Tensor)
        if t.shape[0] != first.shape[0]:
            raise ValueError(
                f"all tensors of {name} must share the batch size (dim 0): {name}[0] has {first.shape[0]}, "
                f"{name}[{i}] has {t.shape[0]}."
            )
        if t.device != first.device:
            raise ValueError(f"all tensors of {name} must be on one device: found {first.device} and {t.device}.")
    return StateSpec(
        kind=kind,
        shapes=tuple(t.shape for t in tensors),  # type: ignore[union-attr]
        dtypes=tuple(t.dtype for t in tensors),  # type: ignore[union-attr]
        device=first.device,
    )


def as_tensors(state: State) -> tuple[Tensor, ...]:
    """The tensors of a state, as a tuple."""
    return (state,) if isinstance(state, Tensor) else tuple(state)


def rebuild(like: State, tensors: Sequence[Tensor]) -> State:
    """``tensors`` in the structure of ``like`` (a Tensor, tuple or list)."""
    if isinstance(like, Tensor):
        return tensors[0]
    return type(like)(tensors)


def detached_leaves(state: State) -> tuple[Tensor, ...]:
    """Detached copies of the state's tensors that require grad: the point at which a Jacobian of f is taken."""
    return tuple(t.detach().requires_grad_() for t in as_tensors(state))


def as_rows(t: Tensor) -> Tensor:
    """(B, ...) -> (B, D), also for B = 0 (where reshape(0, -1) cannot infer D)."""
    return t.reshape(t.shape[0], math.prod(t.shape[1:]))


def flatten(state: State, dtype: torch.dtype) -> Tensor:
    """State -> Tensor (B, D) of ``dtype`` (a copy when the dtype or layout requires one; else the state itself or a
    view of it)."""
    tensors = as_tensors(state)
    if len(tensors) == 1:
        t = tensors[0]
        return (t if t.dim() == 2 else as_rows(t)).to(dtype)
    return torch.cat([as_rows(t).to(dtype) for t in tensors], dim=1)


def unflatten(flat: Tensor, spec: StateSpec) -> State:
    """Tensor (B, D) -> state with ``spec``'s structure, shapes and dtypes."""
    parts = _parts(flat, spec)
    tensors = tuple((p if p.shape == s else p.reshape(s)).to(d) for p, s, d in zip(parts, spec.shapes, spec.dtypes))
    if spec.kind is Tensor:
        return tensors[0]
    return spec.kind(tensors)


def describe_callable(f: object) -> str:
    """A short name for a user's function in error messages: its qualified name, else its repr."""
    name = getattr(f, "__qualname__", None) or getattr(type(f), "__qualname__", None)
    return f"f ({name})" if name else "f"


def check_same_structure(out: object, spec: StateSpec, what: str = "f(z)", f: object = None) -> None:
    """Raise a clear error when ``out`` does not have the structure and shapes described by ``spec``; ``f`` (the
    function that returned ``out``) is named in the message when given."""
    who = f"{describe_callable(f)} returned {what}" if f is not None else what
    expected = "Tensor" if spec.kind is Tensor else f"{spec.kind.__name__} of {len(spec.shapes)} Tensors"
    if spec.kind is Tensor:
        ok_kind = isinstance(out, Tensor)
    else:
        ok_kind = isinstance(out, (tuple, list)) and len(out) == len(spec.shapes)
    if not ok_kind:
        raise TypeError(f"{who}: must return the same structure as the state ({expected}); got {_describe(out)}.")
    for i, (t, shape) in enumerate(zip(as_tensors(out), spec.shapes)):  # type: ignore[arg-type]
        where = who if spec.kind is Tensor else f"{who}[{i}]"
        if not isinstance(t, Tensor):
            raise TypeError(f"{where} must be a Tensor, got {_describe(t)}.")
        if t.shape != shape:
            raise ValueError(
                f"{where} has shape {tuple(t.shape)} but the state has shape {tuple(shape)}: "
                "f must map a state to a state of the same shape (z* = f(z*))."
            )


def check_output(out: object, spec: StateSpec, f: object, what: str = "f(z)") -> None:
    """Everything :func:`check_same_structure` checks, plus each tensor's device and dtype against the state's.

    Under autocast (for the state's device) a floating dtype other than the state's is expected (e.g. a Linear
    returning bfloat16 for a float32 state) and is accepted: the solver casts it back. Called on the first call of f
    only; the solver loop does not repeat it.
    """
    check_same_structure(out, spec, what, f)
    who = f"{describe_callable(f)} returned {what}"
    autocast = torch.is_autocast_enabled(spec.device.type)
    for i, (t, dtype) in enumerate(zip(as_tensors(out), spec.dtypes)):  # type: ignore[arg-type]
        where = who if spec.kind is Tensor else f"{who}[{i}]"
        if t.device != spec.device:
            raise ValueError(
                f"{where} on device {t.device} for a state on {spec.device}; f must return its result on the state's "
                f"device (move f's parameters and inputs there, e.g. module.to({str(spec.device)!r}))."
            )
        if t.dtype != dtype and not (autocast and t.is_floating_point()):
            raise TypeError(
                f"{where} of dtype {t.dtype} for a state of dtype {dtype}; f must return the state's dtype "
                f"(cast its result with .to({dtype}) or start from z0 of the dtype f computes in)."
            )


class FlatMap:
    """``f`` (state -> state) as a map on flat (B, D) tensors of the solver's ``dtype``. f's output (structure,
    shapes, dtypes, device) is checked at its first call only, so that the solver loop pays nothing for it.

    ``flat(x)`` returns f(x) as a new (B, D) tensor. :meth:`bind` ties f to two (B, D) buffers of the loop, so that a
    call reads its input from one and writes f's result into the other with the views between the flat buffers and
    the state's shapes made once, not at every call (for a state of one tensor of shape (B, D) in the solver's dtype:
    no view at all, one copy of f's result).
    """

    def __init__(self, f: Callable[[State], State], spec: StateSpec, dtype: torch.dtype) -> None:
        self.f = f
        self.spec = spec
        self.dtype = dtype
        self._checked = False

    def _call(self, state: State) -> State:
        out = self.f(state)
        if not self._checked:
            check_output(out, self.spec, self.f)
            self._checked = True
        return out

    def __call__(self, x: Tensor) -> Tensor:
        """f at the flat x (B, D), as a new flat tensor (B, D)."""
        return flatten(self._call(unflatten(x, self.spec)), self.dtype)

    def bind(self, x: Tensor, out: Tensor) -> Callable[[], None]:
        """A call ``run()`` that evaluates f at the buffer ``x`` (B, D) and copies f's result into the buffer ``out``
        (B, D), both in the solver's dtype; casts to and from the state's dtypes happen in the call and the copy."""
        spec = self.spec
        inputs = tuple(_shaped(p, s) for p, s in zip(_parts(x, spec), spec.shapes))
        outputs = tuple(_shaped(p, s) for p, s in zip(_parts(out, spec), spec.shapes))
        casts = tuple(d if d != self.dtype else None for d in spec.dtypes)

        def run() -> None:
            args = tuple(t if d is None else t.to(d) for t, d in zip(inputs, casts))
            result = self._call(args[0] if spec.kind is Tensor else spec.kind(args))
            for target, value in zip(outputs, as_tensors(result)):
                target.copy_(value)

        return run


def _parts(flat: Tensor, spec: StateSpec) -> tuple[Tensor, ...]:
    """The (B, d_i) column blocks of a flat (B, D) tensor, one per tensor of the state (views)."""
    return torch.split(flat, spec.sizes, dim=1) if len(spec.sizes) > 1 else (flat,)


def _shaped(part: Tensor, shape: torch.Size) -> Tensor:
    """A (B, d) view in ``shape`` (the view itself when the shapes agree: no operation)."""
    return part if part.shape == shape else part.view(shape)
