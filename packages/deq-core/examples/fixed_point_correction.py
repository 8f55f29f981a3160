"""Fixed-point correction (Bai et al. 2022, DEQ optical flow): a loss on several states of the solve, not only z*.

    python packages/deq-core/examples/fixed_point_correction.py

The cell z = tanh(0.95 W z + U x) has a spectrally normalized W (``deq_core.spectral_norm``), so it is a contraction
for any input. ``deq(f, z0, n_states=4)`` returns in ``info.states`` four states evenly spaced over the solve's
max_iter (the last is the output f(z*) itself); the loss weights state k by gamma^(K - k), as DEQ-Flow does. The output
gets the implicit gradient, the other states one step f(z_i) from their iterate: no graph through the solve, one
adjoint solve. The script fits a small teacher network for 40 steps and prints each state's loss as it falls.
"""

from __future__ import annotations

import torch
from torch import nn

import deq_core

N_STATES, GAMMA = 4, 0.8


class ImplicitRegressor(nn.Module):
    """x (B, n_in) -> one prediction (B, n_out) per state of the fixed-point iteration z <- tanh(0.95 W z + U x)."""

    def __init__(self, n_in: int, width: int, n_out: int) -> None:
        super().__init__()
        self.inject = nn.Linear(n_in, width)
        self.cell = deq_core.spectral_norm(nn.Linear(width, width, bias=False))  # ||W||_2 ~ 1
        self.head = nn.Linear(width, n_out)
        self.deq = deq_core.DEQ(solver="fixed_point", max_iter=12, tol=1e-6, warn_unconverged="never")

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], deq_core.DEQInfo]:
        u = self.inject(x)
        with deq_core.cached_weights(self):  # W / sigma once per forward: one power-iteration step, one W per solve
            _, info = self.deq(lambda z: torch.tanh(0.95 * self.cell(z) + u), torch.zeros_like(u), n_states=N_STATES)
        return [self.head(z) for z in info.states], info  # states at iterations 3, 6, 9 and 12 (the output)


def main() -> None:
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    x = torch.randn(128, 8)
    with torch.no_grad():
        y = teacher(x)
    model = ImplicitRegressor(8, 16, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    weights = [GAMMA ** (N_STATES - 1 - k) for k in range(N_STATES)]  # 0.512, 0.64, 0.8, 1 for the output
    first = last = None
    for step in range(40):
        preds, info = model(x)
        per_state = [nn.functional.mse_loss(p, y) for p in preds]
        loss = sum(w * s for w, s in zip(weights, per_state))
        loss.backward()  # the output: implicit gradient; the other states: one step from their iterate
        opt.step()
        opt.zero_grad()
        first, last = first or [s.item() for s in per_state], [s.item() for s in per_state]
        if step % 10 == 0 or step == 39:
            shown = "  ".join(f"{s:.4f}" for s in last)
            print(f"step {step:2d}  loss {loss.item():.4f}  per state {shown}  nfe {info.nfe} / {info.nfe_backward}")
    assert all(b < 0.2 * a for a, b in zip(first, last)), "every state's loss should fall"


if __name__ == "__main__":
    main()
