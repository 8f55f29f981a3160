"""``compile_step=True``: a capturable solver's step traced with the loop's bookkeeping into one graph per iteration,
another solver's kernels through torch.compile; both give the iterates and NFE of the eager path (forward solves and
the implicit backward), the fallback where torch.compile fails warns once and runs eagerly, and the loop reads the
device once per iteration (the stop test's flags).

Compiling is slow (seconds per graph), so every compiled solve here uses the same few shapes (B = 5, D = 12) and
solver settings, which torch compiles once per process and then reuses."""

from __future__ import annotations

import dataclasses
import warnings
from typing import ClassVar

import pytest
import torch
from torch import Tensor

import deq_core
from conftest import Counter
from deq_core import Anderson, Broyden, FixedPoint, Implicit
from deq_core._solvers import _compile
from deq_core._solvers.broyden import _FIRST_ROWS

BATCH, DIM = 5, 12
SOLVERS = [FixedPoint(damping=0.8), Anderson(m=5), Anderson(m=5, beta=0.6), Broyden(), Broyden(memory=6),
           Broyden(memory=6, line_search=True)]  # fmt: skip


def _problem(dtype: torch.dtype):
    """f(z) = tanh(z W^T + x) with ||W||_2 = 0.9 (contractive), per-sample injections; sample 3 turns NaN once its
    iterate leaves |z| < 0.5 (frozen by the loop at its best finite iterate), so freezing and NaN isolation run."""
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(DIM, DIM, generator=gen, dtype=torch.float64)
    w = (0.9 * w / torch.linalg.matrix_norm(w, ord=2)).to(dtype)
    x = torch.randn(BATCH, DIM, generator=gen, dtype=torch.float64).to(dtype)
    x[3] *= 4

    def f(z: Tensor) -> Tensor:
        out = torch.tanh(z @ w.T + x)
        leaves = (z.abs() > 0.5).any(dim=1, keepdim=True) & (torch.arange(BATCH)[:, None] == 3)
        return torch.where(leaves, torch.full_like(out, float("nan")), out)

    return f, torch.zeros(BATCH, DIM, dtype=dtype)


def _solve(f, z0: Tensor, solver, compile_step: bool) -> deq_core.SolverResult:
    counter = Counter(f)
    res = deq_core.solve(counter, z0, solver, max_iter=40, tol=1e-9, stop_mode="abs", compile_step=compile_step)
    assert res.nfe == counter.calls
    return res


@pytest.mark.parametrize("solver", SOLVERS, ids=repr)
def test_compiled_step_gives_the_eager_iterates_float64(solver):
    f, z0 = _problem(torch.float64)
    eager = _solve(f, z0, solver, compile_step=False)
    compiled = _solve(f, z0, solver, compile_step=True)
    assert bool(eager.nonfinite[3]) and int(eager.converged.sum()) == BATCH - 1  # the problem exercises both paths
    assert compiled.nfe == eager.nfe and compiled.iterations == eager.iterations
    assert torch.equal(compiled.converged, eager.converged) and torch.equal(compiled.nonfinite, eager.nonfinite)
    if isinstance(solver, Broyden):
        # Broyden's updates divide by s^T H y, which amplifies rounding differences from one update to the next
        # (measured here: 3e-12 in z, 1.5e-13 in the residuals). Bound z by the tolerance: both converged to
        # |f(z) - z| <= 1e-9 of a contraction with Lipschitz 0.9, so each is within 1e-9 / (1 - 0.9) of z*; the
        # residuals (from ~1 down to 1e-10) must agree to 1e-11, ten times below the last of them.
        torch.testing.assert_close(compiled.trace, eager.trace, rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(compiled.z, eager.z, rtol=0, atol=2 * 1e-9 / (1 - 0.9))
    else:
        # Same operations, possibly fused in another order: rounding differences (eps = 2.2e-16) of a contraction
        # with Lipschitz constant 0.9 stay within a few hundred eps of the iterates (|z| <= 1) and residuals.
        torch.testing.assert_close(compiled.trace, eager.trace, rtol=1e-9, atol=1e-13)
        torch.testing.assert_close(compiled.z, eager.z, rtol=0, atol=1e-12)


@pytest.fixture
def inductor_calls(monkeypatch) -> list[int]:
    """The number of nodes of every graph the loop traces and hands to inductor while the test runs."""
    calls: list[int] = []
    real_compile = torch._inductor.compile
    monkeypatch.setattr(_compile, "_TRACED", {})  # traced graphs are kept per process: make this test's solve trace

    def spy(graph, example_inputs, *args, **kwargs):
        calls.append(len(graph.graph.nodes))
        return real_compile(graph, example_inputs, *args, **kwargs)

    monkeypatch.setattr(torch._inductor, "compile", spy)
    return calls


def test_compiled_anderson_float32_matches_eager(inductor_calls):
    f, z0 = _problem(torch.float32)
    solver = Anderson(m=5)
    eager = deq_core.solve(f, z0, solver, max_iter=40, tol=1e-5, stop_mode="abs")
    assert not inductor_calls
    compiled = deq_core.solve(f, z0, solver, max_iter=40, tol=1e-5, stop_mode="abs", compile_step=True)
    assert len(inductor_calls) == 1  # one graph for the whole solve: statistics, step and freezing (not f)
    again = deq_core.solve(f, z0 * 0.5, solver, max_iter=40, tol=1e-5, stop_mode="abs", compile_step=True)
    assert len(inductor_calls) == 1 and again.nfe > 1  # the same configuration: the graph is reused
    assert compiled.nfe == eager.nfe
    assert int(eager.converged.sum()) == int(compiled.converged.sum()) == BATCH - 1
    # Both at tol 1e-5 of a contraction with Lipschitz 0.9: within 10 tol of z* and so of each other.
    ok = ~eager.nonfinite
    torch.testing.assert_close(compiled.z[ok], eager.z[ok], rtol=0, atol=1e-4)


def test_compiled_broyden_has_room_where_the_eager_one_grows():
    """Under a limit above 32, eager Broyden's buffers have room for 16 factors at first and double when the updates
    fill them; compiled (capturable: every update kept, no line search), they have room for max_iter factors from the
    start. A solve of more than 16 updates gives the same iterates both ways. The problem: tanh(z W^T + x) with
    W = 0.9 Q (Q orthogonal), whose rotating Jacobian takes Broyden 21 updates to reach 1e-10."""
    gen = torch.Generator().manual_seed(7)
    w = 0.9 * torch.linalg.qr(torch.randn(DIM, DIM, generator=gen, dtype=torch.float64))[0]
    x = torch.randn(BATCH, DIM, generator=gen, dtype=torch.float64)
    z0 = torch.zeros(BATCH, DIM, dtype=torch.float64)
    solves = [
        deq_core.solve(lambda z: torch.tanh(z @ w.T + x), z0, Broyden(), max_iter=40, tol=1e-10,
                       stop_mode="abs", compile_step=compile_step)
        for compile_step in (False, True)
    ]  # fmt: skip
    eager, compiled = solves
    assert eager.iterations > _FIRST_ROWS and bool(eager.converged.all())  # the buffers grew once at least
    assert compiled.iterations == eager.iterations and torch.equal(compiled.converged, eager.converged)
    # As in test_compiled_step_gives_the_eager_iterates_float64: residuals to 1e-11 (ten times below the tolerance),
    # z within tol / (1 - 0.9) of the fixed point from either solve.
    torch.testing.assert_close(compiled.trace, eager.trace, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(compiled.z, eager.z, rtol=0, atol=2 * 1e-10 / (1 - 0.9))


def _deq_grads(solver: deq_core.Solver, compile_step: bool) -> tuple[Tensor, Tensor, deq_core.DEQInfo]:
    torch.manual_seed(3)
    w = (0.5 * torch.randn(DIM, DIM, dtype=torch.float64) / DIM**0.5).requires_grad_()
    x = torch.randn(BATCH, DIM, dtype=torch.float64, requires_grad=True)
    deq = deq_core.DEQ(solver, max_iter=40, tol=1e-10, backward=Implicit(solver, max_iter=40, tol=1e-10),
                       compile_step=compile_step)  # fmt: skip
    z, info = deq(lambda z: torch.tanh(z @ w.T + x), torch.zeros(BATCH, DIM, dtype=torch.float64))
    z.pow(2).sum().backward()
    assert w.grad is not None and x.grad is not None
    return w.grad, x.grad, info


@pytest.mark.parametrize("solver", [Anderson(m=5), Broyden()], ids=repr)
def test_compiled_step_in_the_layer_forward_and_implicit_backward(solver):
    """Both solves of the layer compiled: the forward's and the adjoint's (Broyden(): the default backward's)."""
    w_eager, x_eager, info_eager = _deq_grads(solver, False)
    w_comp, x_comp, info_comp = _deq_grads(solver, True)
    assert info_comp.nfe == info_eager.nfe and info_comp.nfe_backward == info_eager.nfe_backward
    assert bool(info_comp.backward.converged.all())
    torch.testing.assert_close(w_comp, w_eager, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(x_comp, x_eager, rtol=1e-9, atol=1e-12)


def test_failing_compiler_warns_once_and_runs_eagerly(monkeypatch):
    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("no C++ compiler found (test)")

    monkeypatch.setattr(_compile, "BACKEND", broken_backend)
    f, z0 = _problem(torch.float64)
    eager = _solve(f, z0, Anderson(m=5), compile_step=False)
    with pytest.warns(RuntimeWarning, match=r"torch.compile does not work here .*no C\+\+ compiler found") as caught:
        fallback = _solve(f, z0, Anderson(m=5), compile_step=True)
    assert len([w for w in caught if "compile_step" in str(w.message)]) == 1
    assert "compile_step=False to silence" in str(caught[0].message)
    assert fallback.nfe == eager.nfe and torch.equal(fallback.z, eager.z)


def test_eager_solve_does_not_touch_the_compiler(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("torch.compile called with compile_step=False")

    monkeypatch.setattr(torch, "compile", never)
    f, z0 = _problem(torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _solve(f, z0, Anderson(m=5), compile_step=False)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_compile_step_must_be_a_bool(bad):
    f, z0 = _problem(torch.float64)
    with pytest.raises(TypeError, match="compile_step must be True or False"):
        deq_core.solve(f, z0, compile_step=bad)
    with pytest.raises(TypeError, match="compile_step must be True or False"):
        deq_core.DEQ(compile_step=bad)


class _HostReads:
    """Counts reads of tensor values on the host (tolist, item, bool, float, int) while installed."""

    NAMES = ("tolist", "item", "__bool__", "__float__", "__int__")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in self.NAMES:
            real = getattr(Tensor, name)
            monkeypatch.setattr(Tensor, name, self._counted(real))

    def _counted(self, real):
        def method(tensor, *args, **kwargs):
            self.count += 1
            return real(tensor, *args, **kwargs)

        return method


@pytest.mark.parametrize("solver", [FixedPoint(damping=0.8), Anderson(m=5), Broyden(), Broyden(memory=6)], ids=repr)
@pytest.mark.parametrize("compile_step", [False, True])
def test_one_host_read_per_iteration(monkeypatch, solver, compile_step):
    """The stop test needs the per-sample flags on the host once per iteration; nothing else in the loop or the
    solvers reads the device (Broyden's line search, not used here, also reads whether to try again)."""
    f, z0 = _problem(torch.float64)
    deq_core.solve(f, z0, solver, max_iter=40, tol=1e-9, stop_mode="abs", compile_step=compile_step)  # compiles
    reads = _HostReads(monkeypatch)
    res = deq_core.solve(f, z0, solver, max_iter=40, tol=1e-9, stop_mode="abs", compile_step=compile_step)
    monkeypatch.undo()
    assert res.iterations > 10
    assert reads.count == res.iterations + 1  # + the check that z0 is finite


@pytest.mark.parametrize("solver", [FixedPoint(damping=0.8), Anderson(m=5), Anderson(m=5, beta=0.6), Broyden()],
                         ids=repr)  # fmt: skip
@pytest.mark.parametrize("stop_over", ["sample", "batch"])
def test_the_work_between_two_calls_of_f_is_one_graph(solver, stop_over):
    """What compile_step=True compiles for a capturable solver, the loop's statistics of an iterate, the solver's step
    and the freezing of finished samples, traces as one graph without a break (dynamo's explain, no compiling)."""
    from deq_core._solvers import _graph
    from deq_core._solvers._run import SolveRun
    from deq_core._state import FlatMap, state_spec

    f, z0 = _problem(torch.float64)
    run = SolveRun(FlatMap(f, state_spec(z0), torch.float64), z0, 40, 1e-9, "abs", stop_over,
                   compiler=_compile.Compiler(True))  # fmt: skip
    loop = deq_core.Loop(run)
    fz = f(z0)
    state = solver.init(z0, fz, fz - z0, loop)
    tol, rule = _graph._settings(run, z0)
    explained = torch._dynamo.explain(_graph._between)(z0, fz, run.progress, tol, rule, solver, state, loop)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


@dataclasses.dataclass(frozen=True)
class _Relaxed(deq_core.Solver):
    """A user's capturable solver: damped steps whose damping halves every 4 steps, the step count kept in a tensor
    (a pure step, no Python number changing between steps); ``host_read``: it reads a value on the host instead."""

    host_read: bool = False
    capturable: ClassVar[bool] = True

    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: deq_core.Loop) -> tuple[Tensor]:
        return (torch.zeros((), dtype=torch.int64, device=z.device),)

    def step(self, state: tuple[Tensor], z: Tensor, fz: Tensor, g: Tensor, loop: deq_core.Loop) -> deq_core.Step:
        (count,) = state
        damping = 0.9 * 0.5 ** torch.div(count, 4, rounding_mode="floor").to(z.dtype)
        if self.host_read and float(damping) < 0.5:
            damping = damping * 1.0
        return deq_core.Step(z + damping * g, (count + 1,))


def test_a_users_capturable_solver_compiles_and_captures():
    """A solver of one's own with capturable = True runs in the loop's graphs (compile_step, capture) with the eager
    loop's results; one whose step reads the device on the host is a one-line RuntimeError naming the flag."""
    f, z0 = _problem(torch.float64)
    settings = dict(max_iter=12, tol=1e-9, stop_mode="abs", check_every=4)
    eager = deq_core.solve(f, z0, _Relaxed(), **settings)
    for flag in ("compile_step", "capture"):
        res = deq_core.solve(f, z0, _Relaxed(), **settings, **{flag: True})
        assert (res.nfe, res.iterations) == (eager.nfe, eager.iterations)
        torch.testing.assert_close(res.trace, eager.trace, rtol=1e-9, atol=1e-13)
        torch.testing.assert_close(res.z, eager.z, rtol=0, atol=1e-12)
    with pytest.raises(RuntimeError, match=r"compile_step=True: the solver's step cannot be traced") as info:
        deq_core.solve(f, z0, _Relaxed(host_read=True), compile_step=True, **settings)
    assert "\n" not in str(info.value)
