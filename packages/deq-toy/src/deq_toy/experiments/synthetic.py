"""The synthetic 1D task: fit y = h(x) + noise with the scalar DEQ, optionally Jacobian-regularized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import deq_core
from deq_core.train import Forward
from deq_core.train.files import write_json

from ..configs.synthetic import SyntheticConfig
from ..data.synthetic import make_synthetic
from ..models import build_scalar_model
from ..models.scalar_deq import ScalarDEQ
from .base import Experiment, epoch_batch_indices, step_budget


def equilibrium_statistics(
    model: ScalarDEQ, x: Tensor, method: str | deq_core.Solver, max_iter: int, tol: float
) -> dict[str, Any]:
    """Solve z = f(z; x) for every x (B, 1) from z0 = 0 with ``method`` (a solver's shorthand or import path, or a
    :class:`deq_core.Solver`) to absolute residual ``tol``.

    Returns z* (B, 1), per-sample NFE (B,), |df/dz| at z* (B,), the converged mask (B,) and the solver result.
    """
    with torch.no_grad():
        res = deq_core.solve(
            lambda z: model.f(z, x), torch.zeros_like(x), solver=method, max_iter=max_iter, tol=tol, stop_mode="abs"
        )
        z = res.z
        assert isinstance(z, Tensor)
        slope = model.df_dz(z, x).abs().squeeze(-1)
    return {"z": z, "nfe": res.iterations_per_sample, "dfdz": slope, "converged": res.converged, "result": res}


class SyntheticExperiment(Experiment):
    """Data, model and loss of one synthetic 1D run (see :class:`SyntheticConfig`)."""

    def __init__(self, config: SyntheticConfig) -> None:
        self.config = config
        data, optim = config.data, config.optim
        self.data = make_synthetic(data.n_train, data.n_valid, data.noise_std, data.data_seed)
        self.model = build_scalar_model(config)
        self.steps_per_epoch, self.total_steps = step_budget(data.n_train, optim.batch_size, optim.epochs)
        self.eval_every = config.run.eval_every or self.steps_per_epoch

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        cfg = self.config
        idx = epoch_batch_indices(cfg.data.n_train, cfg.optim.batch_size, step, cfg.run.seed)
        return self.data.x_train[idx], self.data.y_train[idx]

    def forward(self, model: torch.nn.Module, batch: tuple[Tensor, Tensor]) -> Forward:
        x, y = batch
        z, info = model(x)
        mse = torch.nn.functional.mse_loss(z, y)
        with torch.no_grad():
            dfdz = float(self.model.df_dz(z.detach(), x).abs().mean())
        return Forward(mse, {"mse": float(mse.detach()), "dfdz_mean": dfdz}, info)

    def baseline(self) -> str:
        """The validation MSE of predicting the mean training target."""
        mse = float(((self.data.y_valid - self.data.y_train.mean()) ** 2).mean())
        return f"mse {mse:.4g} (predicting the mean)"

    def evaluate(self) -> dict[str, float]:
        """Validation MSE of z* (training solver, eval mode) and equilibrium statistics with ``run.eval_solver`` at
        the same limits (the layer's :meth:`~deq_core.DEQ.limits`)."""
        cfg, model, eval_solver = self.config, self.model, self.config.run.eval_solver
        model.eval()
        with torch.no_grad():
            z, info = model(self.data.x_valid)
            mse = float(torch.nn.functional.mse_loss(z, self.data.y_valid))
        max_iter, tol = model.deq.limits()  # the layer's in eval mode, or those of a Plan set on it
        stats = equilibrium_statistics(model, self.data.x_valid, eval_solver, max_iter, tol)
        train_solver = info.forward.iterations_per_sample
        model.train()
        return {
            "loss": mse,
            "mse": mse,
            "nfe_forward": float(info.nfe),
            "residual": float(info.residual.mean()),
            "converged": float(info.converged.float().mean()),
            f"nfe_{cfg.deq.solver}_mean": float(train_solver.float().mean()),
            f"nfe_{eval_solver}_mean": float(stats["nfe"].float().mean()),
            f"nfe_{eval_solver}_max": float(stats["nfe"].max()),
            f"converged_{eval_solver}": float(stats["converged"].float().mean()),
            "dfdz_mean": float(stats["dfdz"].mean()),
            "dfdz_max": float(stats["dfdz"].max()),
        }

    def finish(self, output_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
        from ..plots import plot_figure5

        results = {"config": "synthetic", "jacobian_weight": self.config.deq.jac_weight, **self.evaluate()}
        write_json(output_dir / "results.json", results, indent=2)
        plot_figure5([(f"gamma = {self.config.deq.jac_weight:g}", self.model)], output_dir / "figure5.png")
        return results
