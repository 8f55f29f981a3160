"""Fixed-point correction (Bai et al. 2022, "Deep Equilibrium Optical Flow Estimation"): which iterates of its solve
a :class:`~deq_core.DEQ` call returns besides its output, and how gradients reach f from them.

A state of the layer at iteration i is f(z_i), z_i the solver's best iterate after i iterations (kept by
:func:`~deq_core.solve` with ``states_at``), as the output is f(z*). Its gradient is that of the layer's backward
strategy without an adjoint solve: ``Phantom``'s steps from z_i, or else one step, f(z_i) backpropagated through that
call (JFB). So each state costs one tracked call of f (a graph of one call, whatever the number of iterations) and
no adjoint solve, and ``info.backward`` stays the output's adjoint solve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._solvers._options import check_int
from ._state import State, as_tensors, rebuild
from .backward import JFB, Backward, Phantom
from .info import DEQInfo
from .solve import SolverResult, check_states_at


def sampled_iterations(limit: int, n_states: int | None, states_at: Sequence[int] | None) -> tuple[int, ...] | None:
    """The iterations (of ``limit``, the call's max_iter or unroll steps) whose states come before the output;
    None when neither ``n_states`` nor ``states_at`` is given.

    ``n_states=K``: K states evenly spaced over ``limit``, the last being the output, at iterations
    i_k = limit - (K - k) * (limit // K) for k = 1..K (TorchDEQ's spacing: limit 30, K 4 -> 9, 16, 23, 30); the
    first K - 1 are returned. ``states_at``: those iterations (strictly increasing, in 1..limit).
    """
    if n_states is None and states_at is None:
        return None
    if n_states is not None and states_at is not None:
        raise ValueError("give n_states or states_at, not both.")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"max_iter must be an int >= 1, got {limit!r}.")
    if states_at is not None:
        return check_states_at(states_at, limit)
    check_int("DEQ", "n_states", n_states, 1)
    assert n_states is not None
    if n_states > limit:
        raise ValueError(
            f"DEQ: n_states={n_states} is more than the {limit} iterations of this call (max_iter, or unroll); "
            "lower n_states or raise max_iter."
        )
    step = limit // n_states
    return tuple(limit - (n_states - k) * step for k in range(1, n_states))


def tracked_states(
    backward: Backward, f: Callable[[State], State], z0: State, res: SolverResult, info: DEQInfo,
    excluded: Tensor | None,
) -> list[State]:  # fmt: skip
    """The differentiable states at the solve's kept iterates ``res.states`` (see the module's docstring). The rows
    of the samples in ``excluded`` (f was non-finite for them) are their iterate z_i, detached."""
    strategy = backward if isinstance(backward, Phantom) else JFB()
    states = []
    for z in res.states or ():
        z_t = tuple(t.detach() for t in as_tensors(z))
        fz = as_tensors(f(rebuild(z0, z_t)))
        out = strategy._output(f, z0, z_t, fz, info, lambda res, direction: None)
        states.append(rebuild(z0, _rows_replaced(out, z_t, excluded)))
    return states


def untracked_states(f: Callable[[State], State], z0: State, res: SolverResult, excluded: Tensor | None) -> list[State]:
    """f(z_i) at the solve's kept iterates, without autograd (one call of f each); z_i in the rows of ``excluded``."""
    states = []
    for z in res.states or ():
        out = as_tensors(f(z))
        states.append(rebuild(z0, _rows_replaced(out, as_tensors(z), excluded)))
    return states


def _rows_replaced(out: tuple[Tensor, ...], z: tuple[Tensor, ...], excluded: Tensor | None) -> tuple[Tensor, ...]:
    """``out`` with the rows of the samples in ``excluded`` replaced by those of ``z`` (finite, no gradient)."""
    if excluded is None:
        return out
    return tuple(torch.where(excluded.view(-1, *([1] * (t.dim() - 1))), r.detach(), t) for t, r in zip(out, z))
