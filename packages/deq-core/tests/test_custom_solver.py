"""A user's solver written only against the public protocol (``deq_core.Solver`` / ``Step`` / ``Loop``) works
everywhere a built-in one does: in ``solve()`` (with the loop's bookkeeping: NFE, freezing, NaN isolation), as the
forward and implicit-backward solver of ``DEQ``, and by import path. The solver is the example of the documentation
page "Write your own solver", ``examples/custom_solver.py``, which the page includes as it is: this module runs that
file so that the example cannot rot, then exposes its solver as ``test_custom_solver:SecantStep``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import deq_core
from conftest import Counter, exact_fixed_point_layer, rel_err

EXAMPLE_FILE = Path(__file__).resolve().parents[1] / "examples" / "custom_solver.py"


def _run_example() -> dict:
    namespace: dict = {"__name__": "custom_solver_example"}
    code = compile(EXAMPLE_FILE.read_text(), str(EXAMPLE_FILE), "exec", dont_inherit=True)  # not our __future__ flags
    exec(code, namespace)  # noqa: S102 - our own example
    return namespace


EXAMPLE = _run_example()
SecantStep = EXAMPLE["SecantStep"]  # importable as "test_custom_solver:SecantStep"
PATH = f"{__name__}:SecantStep"


def _symmetric_problem(batch: int = 6, dim: int = 32, top: float = 0.97):
    """f(z) = tanh(W z + x) with symmetric W of eigenvalues in [0, top] (float64): slow for plain iteration."""
    q = torch.linalg.qr(torch.randn(dim, dim, dtype=torch.float64))[0]
    w = q @ torch.diag(torch.linspace(0, top, dim, dtype=torch.float64)) @ q.T
    x = torch.randn(batch, dim, dtype=torch.float64)
    return w, x, torch.zeros(batch, dim, dtype=torch.float64)


def test_example_runs_and_its_solver_beats_plain_iteration():
    res, plain = EXAMPLE["res"], EXAMPLE["plain"]
    assert res.all_converged and plain.all_converged, res.summary()
    assert res.nfe < plain.nfe / 1.5, (res.nfe, plain.nfe)
    x, info = EXAMPLE["x"], EXAMPLE["info"]
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert bool(info.converged.all()) and bool(info.converged_backward.all())


def test_custom_solver_reaches_the_fixed_point_with_exact_nfe():
    w, x, z0 = _symmetric_problem()
    counter = Counter(lambda z: torch.tanh(z @ w + x))
    res = deq_core.solve(counter, z0, solver=SecantStep(), max_iter=200, tol=1e-10)
    ref = deq_core.solve(lambda z: torch.tanh(z @ w + x), z0, solver="broyden", max_iter=200, tol=1e-12)
    assert res.all_converged, res.summary()
    assert res.nfe == counter.calls == res.iterations
    assert rel_err(res.z, ref.z) < 1e-8  # contraction factor <= 0.97: error <= residual / (1 - 0.97)
    assert res.summary().startswith("SecantStep: 6/6 samples converged")


def test_custom_solver_gets_the_loops_freezing_and_nan_isolation():
    """Sample 0 is at its fixed point, sample 1 converges in a few steps (a map of contraction factor <= 0.5, which the
    secant step solves fast), sample 2 walks to NaN: the loop freezes and flags them, sample 3 converges last."""
    w, x, z0 = _symmetric_problem(batch=4, dim=8, top=0.9)

    def f(z):
        out = torch.tanh(z @ w + x)
        out = torch.cat([z[:1], 0.5 * torch.sin(z[1:2]) + 1.0, z[2:3] + 1.0, out[3:]])
        return torch.where((z[:, :1].abs() > 3.0), torch.full_like(out, float("nan")), out)

    res = deq_core.solve(f, z0, solver=SecantStep(), max_iter=100, tol=1e-9, stop_mode="abs")
    assert res.nonfinite.tolist() == [False, False, True, False]
    assert res.converged.tolist() == [True, True, False, True]
    assert torch.isfinite(res.z).all() and torch.equal(res.z[0], z0[0])
    assert int(res.iterations_per_sample[0]) == 1
    for i in (0, 1):  # a converged sample stops changing: its residual stays that of its converged iterate
        k = int(res.iterations_per_sample[i])
        assert k < res.iterations and bool((res.trace[k - 1 :, i] == res.trace[k - 1, i]).all()), i


@dataclasses.dataclass(frozen=True)
class _TwoTrials(deq_core.Solver):
    """Evaluates a damped trial point and the plain step each iteration through loop.trial, keeps the better."""

    def init(self, z, fz, g, loop):
        return None

    def step(self, state, z, fz, g, loop):
        half, f_half = loop.trial(z + 0.5 * g, temporary=True)
        full, f_full = loop.trial(fz)
        better = (f_half - half).norm(dim=1) < (f_full - full).norm(dim=1)
        pick = better[:, None]
        return deq_core.Step(torch.where(pick, half, full), state, fz=torch.where(pick, f_half, f_full))


def test_trial_calls_are_counted_and_their_f_is_reused():
    w, x, z0 = _symmetric_problem(batch=3, dim=8, top=0.8)
    counter = Counter(lambda z: torch.tanh(z @ w + x))
    res = deq_core.solve(counter, z0, solver=_TwoTrials(), max_iter=100, tol=1e-10)
    assert res.all_converged, res.summary()
    assert res.nfe == counter.calls == 1 + 2 * (res.iterations - 1)  # f(z0), then two trials per step, no more


def test_custom_solver_in_the_deq_layer_forward_and_implicit_backward():
    """Gradients of the DEQ layer with SecantStep in both solves equal the exact implicit-function-theorem ones."""
    w, x, z0 = _symmetric_problem(batch=3, dim=10, top=0.9)
    x.requires_grad_(True)
    backward = deq_core.Implicit(SecantStep(max_step=5.0), max_iter=200, tol=1e-11)
    deq = deq_core.DEQ(solver=PATH, max_iter=200, tol=1e-11, backward=backward)
    assert deq.solver == SecantStep() and deq.backward.solver == SecantStep(max_step=5.0)
    z, info = deq(lambda z: torch.tanh(z @ w + x), z0)
    probe = torch.randn_like(z)
    (grad,) = torch.autograd.grad((z * probe).sum(), x)
    assert info.nfe_backward is not None and bool(info.converged_backward.all())

    x_ref = x.detach().clone().requires_grad_(True)
    z_ref = exact_fixed_point_layer(lambda z: torch.tanh(z @ w + x_ref), z.detach())
    (grad_ref,) = torch.autograd.grad((z_ref * probe).sum(), x_ref)
    assert rel_err(grad, grad_ref) < 1e-8


def test_solver_by_import_path_with_options():
    w, x, z0 = _symmetric_problem()
    f = lambda z: torch.tanh(z @ w + x)
    by_path = deq_core.solve(f, z0, PATH, max_step=4.0, max_iter=200, tol=1e-10)
    by_object = deq_core.solve(f, z0, SecantStep(max_step=4.0), max_iter=200, tol=1e-10)
    assert by_path.solver == SecantStep(max_step=4.0)
    assert torch.equal(by_path.z, by_object.z) and by_path.nfe == by_object.nfe
    assert deq_core.options_of(PATH) == {"max_step": 10.0}


@pytest.mark.parametrize(
    ("solver", "options", "exc", "fragment"),
    [
        ("no_such_module_xyz:Solver", {}, ValueError, "cannot import module 'no_such_module_xyz'"),
        (f"{__name__}:Missing", {}, ValueError, "has no attribute 'Missing'"),
        ("deq_core:solve", {}, ValueError, "not a deq_core.Solver"),
        ("newton", {}, ValueError, "unknown solver 'newton'"),
        (PATH, {"m": 3}, TypeError, r"unknown option\(s\) \['m'\] for solver .*its options are max_step=10.0"),
        (PATH, {"max_step": 0.5}, ValueError, "SecantStep: max_step must be >= 1"),
        (deq_core.Anderson(), {"m": 3}, TypeError, "set them on it"),
        (3, {}, TypeError, "solver must be"),
    ],
)
def test_bad_solver_names_and_options_are_one_line_errors(solver, options, exc, fragment):
    with pytest.raises(exc, match=fragment) as err:
        deq_core.solve(torch.cos, torch.zeros(2, 3), solver, **options)
    assert "\n" not in str(err.value)


def test_builtin_solvers_are_checked_once_and_frozen():
    with pytest.raises(ValueError, match="anderson: m must be an int >= 1"):
        deq_core.Anderson(m=0)
    with pytest.raises(TypeError, match="broyden: line_search must be True or False"):
        deq_core.Broyden(line_search="yes")
    solver = deq_core.Anderson(m=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        solver.m = 3  # type: ignore[misc]
    assert deq_core.options_of(solver) == {"m": 4, "beta": 1.0, "reg": 1e-8}
    assert deq_core.options_of(deq_core.Broyden) == deq_core.options_of("broyden")
    res = deq_core.solve(torch.cos, torch.zeros(3, 2), solver, tol=1e-8)
    assert res.solver is solver and res.summary().startswith("anderson:")
