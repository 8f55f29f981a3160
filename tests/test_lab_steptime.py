"""``lab.steptime``: the profiling benchmarks' split of a DEQ training step into f's own work and the rest.
What is checked is what does not depend on the clock: the counts of calls and backward passes against deq-core's own
NFE, that timing f changes no gradient, and that the split's parts are consistent (non-negative, summing to the
step)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import deq_core
from lab.steptime import F_PARTS, StepTimer, profile_steps, split_rows, split_summary, training_step


class Cell(nn.Module):
    """f(z, x) = tanh(W z + x) on a tuple state of two tensors (as an MDEQ's), weight-normalized W."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.lin = deq_core.weight_norm(nn.Linear(2 * dim, 2 * dim, bias=False))
        with torch.no_grad():
            self.lin.parametrizations.weight.original0.mul_(0.3)
        self.dim = dim

    def forward(self, z: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.tanh(self.lin(torch.cat(z, dim=1)) + x)
        return y[:, : self.dim], y[:, self.dim :]


def step(cell: Cell, x: torch.Tensor, timer: StepTimer | None) -> tuple[deq_core.DEQInfo, list[torch.Tensor]]:
    deq = deq_core.DEQ(solver="anderson", max_iter=40, tol=1e-6, backward=deq_core.Implicit("broyden", tol=1e-8))
    f = cell.forward if timer is None else timer.wrap_f(cell.forward)
    if timer is not None:
        deq.forward = timer.wrap("deq forward", deq.forward)  # type: ignore[method-assign]
    cached = deq_core.cached_weights if timer is None else timer.cached_weights
    cell.zero_grad(set_to_none=True)
    z0 = (torch.zeros(x.shape[0], cell.dim), torch.zeros(x.shape[0], cell.dim))

    def forward() -> torch.Tensor:
        with cached(cell):
            z, info = deq(lambda z: f(z, x), z0)
        forward.info = info  # type: ignore[attr-defined]
        return sum(t.square().sum() for t in z)  # type: ignore[return-value]

    loss = forward() if timer is None else timer.wrap("forward", forward)()
    (loss.backward if timer is None else timer.wrap("backward", loss.backward))()
    return forward.info, [p.grad.clone() for p in cell.parameters()]  # type: ignore[attr-defined]


def test_counts_match_deq_core_and_gradients_are_untouched() -> None:
    torch.manual_seed(0)
    cell, x = Cell(), torch.randn(4, 12)
    _, plain = step(cell, x, None)
    timer = StepTimer()
    timer.start()
    info, timed = step(cell, x, timer)
    timer.stop()
    assert timer.f_calls == info.nfe > 2
    assert timer.f_autograd_calls == 1  # the tracked call f(z*)
    assert len(timer.passes) == info.nfe_backward + 1  # the adjoint solve's products, then the pass to the parameters
    for a, b in zip(plain, timed):
        assert torch.equal(a, b)
    parts = timer.split()
    assert all(parts[k] >= 0 for k in parts if k != "other"), parts
    assert sum(parts.values()) == pytest.approx(timer.step_seconds, rel=1e-9)
    assert parts["weight norm"] > 0 and parts["adjoint solver"] > 0
    assert all(a[1] <= b[0] for a, b in zip(timer.passes, timer.passes[1:]))  # passes do not overlap


def test_profile_rows_and_summary() -> None:
    torch.manual_seed(0)
    cell, x = Cell(), torch.randn(4, 12)
    timer = StepTimer()
    prof = profile_steps(timer, lambda: step(cell, x, timer), steps=3)
    assert prof.f_calls >= 3 and prof.passes >= 2
    rows = split_rows(prof, ratio=4.0)
    assert [r[0] for r in rows] == list(prof.parts)
    shares = [float(r[2].rstrip("%")) for r in rows]
    assert sum(shares) == pytest.approx(100.0 * sum(prof.parts.values()) / prof.total, abs=0.1 * len(rows))
    inside = sum(prof.parts[k] for k in F_PARTS) / prof.total
    assert f"i.e. {4.0 * inside:.2f}x the twin step" in split_summary(prof, 4.0, "twin")


def test_training_step_updates_as_a_plain_step_and_times_its_parts() -> None:
    """training_step with and without a timer makes the same update as zero_grad / backward / step by hand."""
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    models = []
    for _ in range(3):
        torch.manual_seed(1)
        models.append(nn.Linear(3, 2))
    by_hand, plain, timed = models
    opt = torch.optim.SGD(by_hand.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        by_hand(x).square().mean().backward()
        opt.step()
    timer = StepTimer()
    for model, t in ((plain, None), (timed, timer)):
        step = training_step(lambda m=model: m(x).square().mean(), torch.optim.SGD(model.parameters(), lr=0.1), t)
        step()
        step()
        for a, b in zip(model.parameters(), by_hand.parameters()):
            assert torch.equal(a, b)
    assert set(timer.regions) == {"forward", "backward", "optimizer"}
    assert all(seconds > 0 for seconds in timer.regions.values())
