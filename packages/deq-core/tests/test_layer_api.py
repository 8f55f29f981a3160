"""The DEQ layer built from strategy objects: shorthands, DEQInfo holding the forward and backward SolverResults,
its one-line summary and short repr, and the warning when a solve stops unconverged."""

from __future__ import annotations

import dataclasses
import re
import warnings

import pytest
import torch

import deq_core
from conftest import scaled_to_norm
from deq_core import JFB, Anderson, Broyden, FixedPoint, Implicit, Phantom


def _problem(batch: int = 4, dim: int = 6):
    w = scaled_to_norm(torch.randn(dim, dim, dtype=torch.float64), 0.8)
    x = torch.randn(batch, dim, dtype=torch.float64, requires_grad=True)
    return (lambda z: torch.tanh(z @ w.T + x)), torch.zeros(batch, dim, dtype=torch.float64), x


def test_strings_are_shorthands_for_the_default_objects():
    deq = deq_core.DEQ(solver="broyden", backward="phantom")
    assert deq.solver == Broyden() and deq.backward == Phantom(steps=5, damping=0.5)
    assert deq_core.DEQ(backward="jfb").backward == JFB()
    assert deq_core.DEQ().backward == Implicit(Broyden(memory=None), max_iter=30, tol=1e-6, stop_mode="rel")
    assert Implicit("anderson").solver == Anderson()
    with pytest.raises(dataclasses.FrozenInstanceError):
        Implicit().tol = 1.0  # type: ignore[misc]


def test_info_holds_the_forward_and_backward_solver_results():
    f, z0, x = _problem()
    deq = deq_core.DEQ(solver=Anderson(m=4), max_iter=50, tol=1e-9, backward=Implicit(Broyden(), tol=1e-10))
    z, info = deq(f, z0)
    ref = deq_core.solve(f, z0, Anderson(m=4), max_iter=50, tol=1e-9)
    assert torch.equal(info.forward.z, ref.z) and info.forward.nfe == ref.nfe == info.nfe
    assert info.forward.solver == Anderson(m=4) and info.mode == "solve"
    assert info.backward is None and info.nfe_backward is None and "backward" not in info.summary()
    z.sum().backward()
    assert info.backward is not None and info.backward.solver == Broyden() and info.backward.tol == 1e-10
    assert info.nfe_backward == info.backward.nfe > 0 and bool(info.converged_backward.all())
    summary = info.summary()
    assert "\n" not in summary and "forward: anderson: 4/4" in summary and "backward: broyden: 4/4" in summary
    text = repr(info)
    assert len(text) < 300 and text.startswith("DEQInfo(mode='solve', forward=(anderson nfe="), text


@pytest.mark.parametrize("backward", [Phantom(steps=3), JFB()])
def test_backward_result_stays_none_without_an_adjoint_solve(backward):
    f, z0, x = _problem()
    z, info = deq_core.DEQ(tol=1e-8, max_iter=50, backward=backward)(f, z0, jacobian_loss=True)
    (z.sum() + info.jacobian_loss).backward()
    assert x.grad is not None and info.backward is None
    assert "jacobian_loss" in info.summary() and "jacobian_loss=" in repr(info)


def test_unrolled_info_is_a_fixed_point_run():
    f, z0, _ = _problem()
    z, info = deq_core.DEQ()(f, z0, unroll=3)
    assert info.mode == "unrolled" and info.forward.solver == FixedPoint() and info.nfe == 3
    prev = f(f(z0))
    expected = (z - prev).norm(dim=1) / z.norm(dim=1)
    torch.testing.assert_close(info.residual, expected.detach(), rtol=1e-12, atol=0)
    assert torch.equal(info.forward.z, prev.detach()) and torch.equal(info.forward.fz, z.detach())


def _unconverged_warnings(policy: str, calls: int, backward: bool) -> list[str]:
    f, z0, _ = _problem()
    implicit = Implicit(FixedPoint(), max_iter=2, tol=1e-12)
    deq = deq_core.DEQ(solver="fixed_point", max_iter=3, tol=1e-12, backward=implicit, warn_unconverged=policy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(calls):
            z, _ = deq(f, z0)
            if backward:
                z.sum().backward()
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize(("policy", "expected"), [("once", 2), ("always", 6), ("never", 0)])
def test_unconverged_solves_warn_as_configured(policy, expected):
    messages = _unconverged_warnings(policy, calls=3, backward=True)
    assert len(messages) == expected, messages
    if messages:
        assert sum("DEQ forward solve stopped unconverged: fixed_point: 0/4" in m for m in messages) == expected // 2
        assert sum("DEQ backward solve stopped unconverged: fixed_point: 0/4" in m for m in messages) == expected // 2


def test_converged_solves_do_not_warn():
    f, z0, _ = _problem()
    deq = deq_core.DEQ(max_iter=100, tol=1e-8, backward=Implicit(max_iter=100, tol=1e-8), warn_unconverged="always")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z, info = deq(f, z0)
        z.sum().backward()
    assert bool(info.converged.all()) and bool(info.converged_backward.all())


def _readme_blocks() -> list[str]:
    from test_custom_solver import README

    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("block", range(len(_readme_blocks())))
def test_readme_python_examples_run(block, tmp_path, monkeypatch):
    """Every Python block of the README runs as written, in an empty folder (the custom-solver one is also checked
    in detail in test_custom_solver.py)."""
    code = _readme_blocks()[block]
    monkeypatch.chdir(tmp_path)  # an example may write files (the training-pieces one writes runs/demo/)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an example may stop a solve unconverged
        exec(compile(code, f"README.md block {block}", "exec", dont_inherit=True), {"__name__": "readme"})
