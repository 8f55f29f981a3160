"""The DEQ layer built from strategy objects: shorthands, DEQInfo holding the forward and backward SolverResults,
its one-line summary and short repr, and the warning when a solve stops unconverged."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.utils.checkpoint

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


class _Cell(torch.nn.Module):
    """f(z) = tanh(W z + U x): the parameters live in the module, not in the layer's arguments."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.w = torch.nn.Linear(dim, dim, bias=False, dtype=torch.float64)
        self.u = torch.nn.Linear(dim, dim, dtype=torch.float64)
        with torch.no_grad():
            self.w.weight.copy_(scaled_to_norm(self.w.weight, 0.8))

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.w(z) + self.u(x))


_BACKWARDS = [Implicit(), Phantom(steps=3), JFB()]


@pytest.mark.parametrize("backward", _BACKWARDS, ids=["implicit", "phantom", "jfb"])
@pytest.mark.parametrize("state", ["tensor", "tuple"])
def test_no_gradient_needed_gives_a_plain_tensor(backward, state):
    """Frozen parameters and an input without grad: z_out is a plain tensor (no graph, no adjoint solve), as a
    PyTorch op's output would be, with the value of the tracked call f(z*)."""
    torch.manual_seed(0)
    cell = _Cell().requires_grad_(False)
    x = torch.randn(4, 6, dtype=torch.float64)
    deq = deq_core.DEQ(tol=1e-10, max_iter=60, backward=backward)
    if state == "tensor":
        z, info = deq(lambda z: cell(z, x), torch.zeros(4, 6, dtype=torch.float64))
        outputs = (z,)
    else:
        z, info = deq(lambda s: (cell(s[0], x), 0.5 * s[0]), (torch.zeros(4, 6, dtype=torch.float64),) * 2)
        outputs = z
    for out in outputs:
        assert not out.requires_grad and out.grad_fn is None
    torch.testing.assert_close(outputs[0], cell(info.forward.z if state == "tensor" else info.forward.z[0], x))
    z, info = deq(lambda z: cell(z, x), torch.zeros(4, 6, dtype=torch.float64), jacobian_loss=True)
    assert not z.requires_grad and z.grad_fn is None
    assert info.jacobian_loss is not None and float(info.jacobian_loss) > 0 and not info.jacobian_loss.requires_grad
    z, info = deq(lambda z: cell(z, x), torch.zeros(4, 6, dtype=torch.float64), unroll=3, jacobian_loss=True)
    assert not z.requires_grad and not info.jacobian_loss.requires_grad


@pytest.mark.parametrize("backward", _BACKWARDS, ids=["implicit", "phantom", "jfb"])
@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_no_gradient_under_no_grad(backward, context):
    cell, x = _Cell(), torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    with context():
        z, _ = deq_core.DEQ(backward=backward)(lambda z: cell(z, x), torch.zeros(4, 6, dtype=torch.float64))
    assert not z.requires_grad and z.grad_fn is None


@pytest.mark.parametrize("backward", _BACKWARDS, ids=["implicit", "phantom", "jfb"])
def test_a_parameter_or_an_input_that_needs_grad_gets_it(backward):
    """Only the module's parameters (not passed to the layer), or only the input, require grad: z_out does."""
    torch.manual_seed(0)
    cell = _Cell()
    x = torch.randn(4, 6, dtype=torch.float64)
    deq = deq_core.DEQ(tol=1e-10, max_iter=60, backward=backward)
    z, _ = deq(lambda z: cell(z, x), torch.zeros(4, 6, dtype=torch.float64))
    assert z.requires_grad
    z.sum().backward()
    assert cell.w.weight.grad is not None and cell.u.bias.grad is not None
    cell.requires_grad_(False)
    x.requires_grad_()
    z, _ = deq(lambda z: cell(z, x), torch.zeros(4, 6, dtype=torch.float64))
    assert z.requires_grad
    z.sum().backward()
    assert x.grad is not None and float(x.grad.abs().sum()) > 0


@pytest.mark.parametrize("steps", [1, 3])
def test_unrolling_from_a_learned_initial_state_keeps_its_gradient(steps):
    """Frozen f, but z0 is a leaf that requires grad (a learned initial state): the unrolled output keeps the graph
    to it, also when the Jacobian term makes the last step's input a leaf of the layer's own."""
    cell, x = _Cell().requires_grad_(False), torch.randn(4, 6, dtype=torch.float64)
    z0 = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    z, info = deq_core.DEQ()(lambda z: cell(z, x), z0, unroll=steps, jacobian_loss=True)
    assert z.requires_grad and info.jacobian_loss.requires_grad
    (z.sum() + info.jacobian_loss).backward()
    assert z0.grad is not None and float(z0.grad.abs().sum()) > 0


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad=True:UserWarning")  # the solve's calls
@pytest.mark.parametrize("backward", [Phantom(steps=3), JFB()], ids=["phantom", "jfb"])
def test_parameters_hidden_from_the_graph_still_get_gradients(backward):
    """A reentrant checkpoint inside f hides the parameters it uses from the graph (its node links to its inputs
    only, and its backward reruns the cell); the layer cannot see that they need a gradient, so it keeps the graph
    of any custom autograd Function. (Reentrant checkpoints cannot take the implicit backward's autograd.grad.)"""
    torch.manual_seed(0)
    cell = _Cell()
    x = torch.randn(4, 6, dtype=torch.float64)

    def f(z: torch.Tensor) -> torch.Tensor:
        return torch.utils.checkpoint.checkpoint(cell, z, x, use_reentrant=True)

    z, _ = deq_core.DEQ(tol=1e-10, max_iter=60, backward=backward)(f, torch.zeros(4, 6, dtype=torch.float64))
    assert z.requires_grad
    z.sum().backward()
    assert cell.w.weight.grad is not None and float(cell.w.weight.grad.abs().sum()) > 0


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


README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("block", range(len(_readme_blocks())))
def test_readme_python_examples_run(block, tmp_path, monkeypatch):
    """Every Python block of the README runs as written, in an empty folder (the examples of the site's deq-core
    pages run in the repository's tests/test_docs.py, the custom-solver example in test_custom_solver.py)."""
    code = _readme_blocks()[block]
    monkeypatch.chdir(tmp_path)  # an example may write files (the training-pieces one writes runs/demo/)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an example may stop a solve unconverged
        exec(compile(code, f"README.md block {block}", "exec", dont_inherit=True), {"__name__": "readme"})
