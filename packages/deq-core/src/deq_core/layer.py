"""The implicit layer: ``z_star, info = DEQ(...)(f, z0)``."""

from __future__ import annotations

import contextlib
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import BackwardCFunction

from ._solvers import resolve_solver
from ._solvers._options import check_int
from ._solvers.resolve import SolverLike
from ._state import State, as_tensors, check_output, detached_leaves, rebuild, state_spec
from ._trajectory import sampled_iterations, tracked_states, untracked_states
from .backward import Backward, resolve_backward
from .info import DEQInfo
from .jacobian import frobenius_from_graph
from .plan import Plan
from .solve import SolverResult, check_capture, check_interval, check_limits, check_max_iter, check_tol, solve

__all__ = ["DEQ", "UNCONVERGED_WARNING"]

# The start of the RuntimeWarning a solve that stops above its tol raises (``warn_unconverged``), as a regular
# expression for ``warnings.filterwarnings(message=...)``: e.g. a training loop that counts these solves instead.
UNCONVERGED_WARNING = r"DEQ (forward|backward) solve stopped unconverged"

_WARN_UNCONVERGED = ("once", "always", "never")


class DEQ(nn.Module):
    """A deep equilibrium layer: finds z* = f(z*) and differentiates through it.

    ``z_out, info = deq(f, z0)`` returns z_out = f(z*) (one tracked call of f at the solver's best iterate z*)
    and :class:`DEQInfo`. The layer holds no parameters: f closes over the model's parameters and input injection.

    Args:
        solver: the forward solver, a :class:`~deq_core.Solver` (e.g. ``Anderson(m=8)``) or a name (shorthand or
            import path, see :func:`deq_core.solve`).
        max_iter, tol, stop_mode: the forward solve's limits.
        stop_over: "sample" (each sample's residual must meet tol, the default) or "batch" (the residual of the
            whole batch, as the reference DEQ code stops; see :func:`deq_core.solve`), in training and eval mode.
        backward: how gradients pass the fixed point: ``Implicit(solver, max_iter, tol, stop_mode)`` (the default,
            the adjoint system solved by its own solver), ``Phantom(steps, damping)`` or ``JFB()``; or the shorthand
            "implicit", "phantom", "jfb" for their defaults.
        eval_max_iter, eval_tol: limits used in eval mode (``module.eval()``), e.g. a relaxed tolerance; default:
            the training ones.
        jacobian_samples: Hutchinson probes for ``jacobian_loss=True``.
        on_nonfinite: what to do when f returns NaN/Inf during the forward solve: "raise" (FloatingPointError),
            "warn" or "ignore" (the statistics in ``info.nonfinite`` always say it). With "warn" / "ignore" those
            samples are excluded from the gradient: their rows of z_out are their best finite values, detached, and
            the other samples get the gradients of the batch without them (for f whose samples do not interact).
        warn_unconverged: a RuntimeWarning with the solve's summary when a forward or implicit-backward solve stops
            with samples above its tol: "once" (per layer and direction, the default), "always" or "never".
        check_every: iterations between the forward solve's host checks of whether a sample is still active (see
            :func:`deq_core.solve`; None: 1 on the CPU, 4 elsewhere); the implicit backward has its own
            (``Implicit(check_every=...)``).
        compile_step: run the solvers' tensor work between calls of f (forward and implicit backward solves)
            through torch.compile, f eagerly (see :func:`deq_core.solve`); False (the default): all eager.
        capture: run the forward solve's iterations between two host checks as one compiled graph with f (see
            :func:`deq_core.solve`; ``check_every=max_iter``: the whole solve); needs a capturable forward solver.
            The implicit backward's solve is not captured (``compile_step`` applies to it).

    Attribute ``plan``: a :class:`~deq_core.Plan` (unroll, this step's max_iter and tol, jacobian_loss) that the layer
    follows in every call, or None (the default). A training loop sets it on every DEQ layer of a model for one step
    with :func:`deq_core.use_plan`, and an evaluation at other limits (a sweep) for its forward passes, so that models
    need not pass these arguments down and the layer's own limits never change; arguments given in a call win.
    :meth:`limits` says which limits a call would solve to.

    Memory: the solve runs without autograd; only the final call f(z*) is kept for backward, so training memory
    does not grow with the number of solver iterations. With the implicit backward z_out is a view of that call's
    result (no copy): modify a copy of z_out, not z_out itself, in place (autograd raises on the latter). In eval mode
    z_out is still differentiable when autograd is enabled; under torch.no_grad() no extra call of f is made.

    Gradients: the layer holds no list of f's parameters; it learns what f depends on from the autograd graph of the
    tracked call f(z*). When that graph reaches no tensor that requires grad besides z* itself (f's parameters are
    frozen and its inputs need no gradient), z_out is returned as PyTorch ops return such results: with
    ``requires_grad=False``, no graph and no backward strategy attached (so nothing can start a useless adjoint
    solve), its value the tracked call's; ``info.jacobian_loss`` is then detached too. A graph with a custom
    autograd Function in it (which may use tensors its graph does not show, e.g. a reentrant checkpoint) counts as
    needing gradients.
    """

    def __init__(
        self,
        solver: SolverLike = "anderson",
        max_iter: int = 30,
        tol: float = 1e-4,
        stop_mode: str = "rel",
        backward: Backward | str = "implicit",
        stop_over: str = "sample",
        eval_max_iter: int | None = None,
        eval_tol: float | None = None,
        jacobian_samples: int = 1,
        on_nonfinite: str = "raise",
        warn_unconverged: str = "once",
        compile_step: bool = False,
        check_every: int | None = None,
        capture: bool = False,
    ) -> None:
        super().__init__()
        self.solver = resolve_solver(solver)
        check_limits(max_iter, tol, stop_mode, stop_over)
        check_max_iter(eval_max_iter, "eval_max_iter", optional=True)
        check_tol(eval_tol, "eval_tol", optional=True)
        self.backward = resolve_backward(backward)
        check_int("DEQ", "jacobian_samples", jacobian_samples, 1)
        if on_nonfinite not in ("raise", "warn", "ignore"):
            raise ValueError(f"on_nonfinite must be 'raise', 'warn' or 'ignore', got {on_nonfinite!r}.")
        if warn_unconverged not in _WARN_UNCONVERGED:
            raise ValueError(f"warn_unconverged must be one of {list(_WARN_UNCONVERGED)}, got {warn_unconverged!r}.")
        self.max_iter, self.tol, self.stop_mode, self.stop_over = max_iter, tol, stop_mode, stop_over
        self.eval_max_iter, self.eval_tol = eval_max_iter, eval_tol
        self.jacobian_samples = jacobian_samples
        self.on_nonfinite = on_nonfinite
        self.warn_unconverged = warn_unconverged
        if not isinstance(compile_step, bool):
            raise TypeError(f"compile_step must be True or False, got {compile_step!r}.")
        self.compile_step = compile_step
        self.capture = check_capture(capture, self.solver)
        self.check_every = check_interval(check_every)
        self._warned: set[str] = set()  # directions ("forward", "backward") already warned about, for "once"
        self.plan: Plan | None = None  # set for one step by deq_core.use_plan

    def extra_repr(self) -> str:
        return (
            f"solver={self.solver!r}, max_iter={self.max_iter}, tol={self.tol:g}, stop_mode={self.stop_mode!r}, "
            f"stop_over={self.stop_over!r}, backward={self.backward!r}"
        )

    def forward(
        self,
        f: Callable[[State], State],
        z0: State,
        *,
        max_iter: int | None = None,
        tol: float | None = None,
        unroll: int | None = None,
        jacobian_loss: bool | None = None,
        n_states: int | None = None,
        states_at: Sequence[int] | None = None,
    ) -> tuple[State, DEQInfo]:
        """Solve and return (f(z*), info).

        Args:
            f: state -> state of the same structure.
            z0: initial state, Tensor (B, ...) or tuple/list of Tensors. When solving, no gradient flows into z0
                (z* does not depend on it).
            max_iter, tol: override the limits for this call (e.g. a random jitter of max_iter during training).
                ``max_iter``, ``tol``, ``unroll`` and ``jacobian_loss`` left at None come from the layer's ``plan``
                when one is set (:func:`deq_core.use_plan`; :meth:`limits`).
            unroll: instead of solving, apply f ``unroll`` times from z0 with ordinary backpropagation (the
                weight-tied pretraining phase of the papers); gradients also reach z0 when it requires grad (e.g. a
                learned initial state); info.residual is that of the last-but-one iterate.
            jacobian_loss: also set ``info.jacobian_loss``, the Hutchinson estimate of ||J_f(z*)||_F^2 / D computed
                from the same tracked call f(z*) (no extra call of f). Needs autograd. None: the plan's, else False.
            n_states: fixed-point correction (Bai et al. 2022; TorchDEQ's ``n_states``): also return, in
                ``info.states``, K = n_states differentiable states of the solve, the last being the output, spaced
                over this call's max_iter (or ``unroll``) as TorchDEQ spaces them: at iterations
                max_iter - (K - k) * (max_iter // K), k = 1..K (max_iter 30, K 4: 9, 16, 23, 30). Loss:
                ``sum(w * crit(head(s)) for w, s in zip(weights, info.states))``. The state at iteration i is f(z_i),
                z_i the best iterate after i iterations (iteration 1 evaluates z0), as the output is f(z*). A sample
                that converged before i, or every sample when the solve stopped before i, stands at its z* there,
                so a sample's states do not depend on the rest of the batch. Gradients: the output keeps the layer's
                backward (the implicit gradient by default); the other states get ``Phantom``'s steps from z_i with
                ``backward=Phantom(...)``, else one step, f(z_i) backpropagated through that call (JFB; TorchDEQ
                with ift=True also gives the implicit gradient to the last state only, a phantom one to the others).
                Cost: K - 1 state-sized copies in the solve, whatever max_iter, and one tracked call of f per state:
                no graph through the solve, no extra adjoint solve. With ``unroll``: f applied i times, with
                ordinary backprop. Under torch.no_grad(): the values f(z_i), one call of f each.
            states_at: instead of n_states, the iterations of the states before the output (strictly increasing,
                in 1..max_iter; TorchDEQ's ``indexing``): ``info.states`` has len(states_at) + 1 entries.
        """
        plan = self.plan
        if plan is not None:
            unroll = plan.unroll if unroll is None else unroll
            jacobian_loss = plan.jacobian_loss if jacobian_loss is None else jacobian_loss
        jacobian_loss = bool(jacobian_loss)
        if jacobian_loss and not torch.is_grad_enabled():
            raise RuntimeError("jacobian_loss=True needs autograd; call the layer outside torch.no_grad().")
        if unroll is not None:
            return self._unrolled(f, z0, unroll, jacobian_loss, n_states, states_at)
        limit, tolerance = self.limits()
        sampled = sampled_iterations(limit if max_iter is None else max_iter, n_states, states_at)
        res = solve(
            f,
            z0,
            solver=self.solver,
            max_iter=limit if max_iter is None else max_iter,
            tol=tolerance if tol is None else tol,
            stop_mode=self.stop_mode,
            stop_over=self.stop_over,
            check_every=self.check_every,
            compile_step=self.compile_step,
            capture=self.capture,
            states_at=sampled,
        )
        info = DEQInfo(forward=res)
        excluded = self._report_nonfinite(res)
        self._report_unconverged(res, "forward")
        if not torch.is_grad_enabled():
            if sampled is not None:  # fixed-point correction: the states before the output
                info.states = [*untracked_states(f, z0, res, excluded), res.fz]
            return res.fz, info
        with _nonfinite_rows_sanitized(excluded is not None):
            out = self._tracked(f, z0, res, info, jacobian_loss, excluded)
            states = None if sampled is None else tracked_states(self.backward, f, z0, res, info, excluded)
        if excluded is not None:  # samples f produced NaN/Inf for: their best finite value, no gradient through them
            out = tuple(torch.where(_rows_mask(excluded, t), r.detach(), t) for t, r in zip(out, as_tensors(res.fz)))
        z_out = rebuild(z0, out)
        if states is not None:
            info.states = [*states, z_out]
        return z_out, info

    def _tracked(
        self, f: Callable[[State], State], z0: State, res: SolverResult, info: DEQInfo, jacobian_loss: bool,
        excluded: Tensor | None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """The differentiable output from the solver's z*: the one tracked call f(z*) (and the phantom steps), with
        the backward strategy attached; sets ``info.jacobian_loss`` (averaged over the samples not in ``excluded``)."""
        z_star = detached_leaves(res.z)
        fz = f(rebuild(z0, z_star))
        check_output(fz, state_spec(z0), f, "f(z*)")
        fz_t = as_tensors(fz)
        needed = _needs_grad(fz_t, z_star)
        if jacobian_loss:
            per_sample = frobenius_from_graph(fz_t, z_star, self.jacobian_samples)
            kept = per_sample if excluded is None else per_sample[~excluded]
            loss = kept.mean() if kept.numel() else kept.sum()  # no sample left: 0, not NaN
            info.jacobian_loss = loss if needed else loss.detach()
        if not needed:  # nothing f computes with needs a gradient: a plain tensor, no graph, no backward strategy
            return tuple(t.detach() for t in fz_t)
        return self.backward._output(f, z0, z_star, fz_t, info, self._report_unconverged, self.compile_step)

    def _unrolled(
        self, f: Callable[[State], State], z0: State, steps: int, jacobian_loss: bool, n_states: int | None = None,
        states_at: Sequence[int] | None = None,
    ) -> tuple[State, DEQInfo]:  # fmt: skip
        if not (isinstance(steps, int) and steps >= 1):
            raise ValueError(f"unroll must be an int >= 1, got {steps!r}.")
        sampled = sampled_iterations(steps, n_states, states_at)
        spec = state_spec(z0)
        z, prev = z0, z0
        made: tuple[Tensor, ...] = ()  # leaves made here for the Jacobian: no gradient of the caller's flows there
        states: list[State] = []
        for i in range(steps):
            if jacobian_loss and i == steps - 1:  # the last step's input must be in the graph to take J there
                given = as_tensors(z)
                z = rebuild(z0, tuple(t if t.requires_grad else t.detach().requires_grad_() for t in given))
                made = tuple(new for new, old in zip(as_tensors(z), given) if new is not old)
            prev, z = z, f(z)
            check_output(z, spec, f)
            if sampled is not None and i + 1 in sampled:
                states.append(z)
        jac = None
        if jacobian_loss:
            jac = frobenius_from_graph(as_tensors(z), as_tensors(prev), self.jacobian_samples).mean()
            if made and not _needs_grad(as_tensors(z), made):  # as in a solve: no gradient needed, no graph kept
                z, jac = rebuild(z0, tuple(t.detach() for t in as_tensors(z))), jac.detach()
        tol = self.tol if self.training else self._eval_limits()[1]
        info = DEQInfo.from_unrolled(prev, z, steps, stop_mode=self.stop_mode, tol=tol, jacobian_loss=jac)
        if sampled is not None:
            info.states = [*states, z]
        return z, info

    def limits(self) -> tuple[int, float]:
        """(max_iter, tol) of the forward solve of a call without those arguments: the plan's where it sets them
        (:func:`deq_core.use_plan`), else ``eval_max_iter`` / ``eval_tol`` in eval mode (where given), else the
        training ones."""
        limit, tolerance = (self.max_iter, self.tol) if self.training else self._eval_limits()
        if self.plan is not None:
            limit = limit if self.plan.max_iter is None else self.plan.max_iter
            tolerance = tolerance if self.plan.tol is None else self.plan.tol
        return limit, tolerance

    def _eval_limits(self) -> tuple[int, float]:
        """max_iter and tol in eval mode: eval_max_iter / eval_tol where given (not None), else the training ones."""
        limit = self.max_iter if self.eval_max_iter is None else self.eval_max_iter
        tolerance = self.tol if self.eval_tol is None else self.eval_tol
        return limit, tolerance

    def _report_unconverged(self, res: SolverResult, direction: str) -> None:
        """Warn (``warn_unconverged``) when a solve stopped with samples above its tol (non-finite ones excluded:
        ``on_nonfinite`` covers them)."""
        if self.warn_unconverged == "never" or bool((res.converged | res.nonfinite).all()):
            return
        if self.warn_unconverged == "once":
            if direction in self._warned:
                return
            self._warned.add(direction)
        note = ""
        if self.warn_unconverged == "once":
            note = " (shown once per layer; set warn_unconverged='always' or 'never')"
        warnings.warn(
            f"DEQ {direction} solve stopped unconverged: {res.summary()}; raise max_iter or tol, or regularize the "
            f"Jacobian{note}.",
            RuntimeWarning,
            stacklevel=5,  # the caller of the layer (through nn.Module.__call__), for the forward solve
        )

    def _report_nonfinite(self, res: SolverResult) -> Tensor | None:
        """Raise, warn or stay silent (``on_nonfinite``) when f produced NaN/Inf; return the (B,) mask of those
        samples, or None when there are none."""
        if not bool(res.nonfinite.any()):
            return None
        rows = res.nonfinite.nonzero().flatten().tolist()
        message = f"DEQ forward solve: f produced NaN/Inf for sample(s) {rows}; " + res.summary()
        if self.on_nonfinite == "raise":
            raise FloatingPointError(message + " (set on_nonfinite='warn' to continue without these samples)")
        if self.on_nonfinite == "warn":
            warnings.warn(
                message + ". They are excluded from the gradient: their outputs are their best finite values, "
                "detached, and give the other samples' gradients as if they were not in the batch.",
                RuntimeWarning,
                stacklevel=3,
            )
        return res.nonfinite


def _needs_grad(outputs: Sequence[Tensor], leaves: Sequence[Tensor]) -> bool:
    """Whether the autograd graph of ``outputs`` reaches a tensor that requires grad other than ``leaves`` (the
    leaves the layer made, e.g. z*): a parameter or input of f, directly or through other operations.

    The graph is walked breadth-first from the outputs' ``grad_fn`` back to its leaves (``AccumulateGrad`` nodes)
    and stops at the first other leaf, so that a training step (a parameter a few nodes from the output) pays little.
    A custom autograd Function node counts as needing a gradient: it may use tensors that its graph does not show (a
    reentrant checkpoint reruns the module in its backward; the module's parameters are not among its inputs).
    """
    own = {id(t) for t in leaves}
    queue: deque[Any] = deque()
    for t in outputs:
        if t.grad_fn is not None:
            queue.append(t.grad_fn)
        elif t.requires_grad and id(t) not in own:  # f returned a tensor that is itself a leaf needing grad
            return True
    seen: set[Any] = set()  # the nodes themselves (hashed by identity), kept alive so that none is visited twice
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, BackwardCFunction):
            return True
        variable = getattr(node, "variable", None)  # an AccumulateGrad node: a leaf tensor that requires grad
        if variable is not None:
            if id(variable) not in own:
                return True
            continue
        queue.extend(child for child, _ in node.next_functions if child is not None)
    return False


def _rows_mask(rows: Tensor, like: Tensor) -> Tensor:
    """(B,) bool -> (B, 1, ..., 1), broadcastable against ``like``."""
    return rows.view(-1, *([1] * (like.dim() - 1)))


def _finite_or_one(t: Tensor) -> Tensor:
    """A tensor saved for backward, with NaN/Inf entries replaced by 1 (only rows of excluded samples hold them)."""
    if not t.is_floating_point():
        return t
    with torch.no_grad():
        finite = torch.isfinite(t)
        return t if bool(finite.all()) else torch.where(finite, t, torch.ones((), dtype=t.dtype, device=t.device))


@contextlib.contextmanager
def _nonfinite_rows_sanitized(active: bool) -> Iterator[None]:
    """While active, tensors autograd saves for backward have their NaN/Inf entries replaced by 1.

    A sample for which f is NaN (e.g. a NaN in its input) makes the values f saves for backward NaN in that sample's
    rows; the gradient reaching those rows is zero (the sample is excluded), but 0 x NaN = NaN would still reach
    every parameter through the batch sums of the backward (e.g. W's gradient g^T x). With finite stand-ins the
    excluded rows contribute exactly 0, and the other rows, whose saved values are finite, are untouched. Only used
    when a sample is non-finite, so an ordinary step pays nothing.
    """
    if not active:
        yield
        return
    with torch.autograd.graph.saved_tensors_hooks(_finite_or_one, lambda t: t):
        yield
