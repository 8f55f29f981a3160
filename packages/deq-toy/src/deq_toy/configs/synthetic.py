"""Presets of the synthetic 1D study (Jacobian-regularization paper, section 5.1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from deq_core.train.checks import check_choice
from deq_core.train.deq_config import DEQConfig, deq_section, deq_settings
from deq_core.train.run_config import replace_config

from .checks import check_at_least_one


@dataclass(frozen=True)
class SyntheticConfig:
    """The 1D DEQ f(z; x) = W2^T ReLU(W1 z + U x + b) trained to fit y = h(x) + noise.

    Training: Adam with a cosine learning-rate schedule over ``epochs`` passes of ``batch_size`` pairs (400 x 16
    steps: at the earlier 100 epochs the regularized models had not reached their plateau; see README), loss
    MSE(z*, y) + deq.jac_weight * (df/dz at z*)^2 (Hutchinson estimate, ``deq.jacobian_samples`` probes).
    Solver (``deq``, a :class:`deq_core.train.deq_config.DEQConfig`, which builds the :class:`deq_core.DEQ` layer):
    Broyden to residual |f(z) - z| <= ``deq.tol`` (``deq.stop_mode`` "abs"; "rel" divides by |f(z)|) in at most
    ``deq.max_iter`` iterations; ``deq.backward`` "implicit" (the adjoint system solved by Broyden to
    ``deq.backward_tol`` in ``deq.backward_max_iter``, "abs"), "phantom" or "jfb"; ``deq.on_nonfinite`` "warn" leaves
    samples whose f turns NaN/Inf out of the gradient ("raise" stops, "ignore" is silent).
    Evaluation statistics (NFE, |df/dz|) are measured with ``eval_solver`` at ``deq.tol``.
    ``feedback=False`` fixes W1 at 0: f ignores z, and the model is the explicit network W2^T ReLU(U x + b) (a
    reference: how well the same training fits y without any equilibrium).
    """

    task: Literal["synthetic"] = "synthetic"
    seed: int = 0
    data_seed: int = 0
    n_train: int = 4096
    n_valid: int = 1000
    noise_std: float = 0.05
    width: int = 50
    feedback: bool = True
    epochs: int = 400
    batch_size: int = 256
    lr: float = 5e-3
    weight_decay: float = 0.0
    eval_solver: Literal["fixed_point", "anderson", "broyden"] = "fixed_point"
    deq: DEQConfig = deq_section(
        solver="broyden", max_iter=100, tol=1e-3, stop_mode="abs", backward_solver="broyden", backward_max_iter=50,
        backward_tol=1e-6, backward_stop_mode="abs", on_nonfinite="warn",
    )  # fmt: skip
    log_every: int = 20
    eval_every: int = 200
    save_every: int = 500
    threads: int = 1

    def check(self) -> None:
        """Raise ValueError for values no run can use."""
        positive = (
            "n_train",
            "n_valid",
            "width",
            "epochs",
            "batch_size",
            "log_every",
            "eval_every",
            "save_every",
            "threads",
        )
        check_at_least_one(self, positive)
        check_choice(self, "eval_solver")
        if self.lr <= 0 or self.noise_std < 0:
            raise ValueError("noise_std must be >= 0 and lr > 0")


_BASE = SyntheticConfig()

SYNTHETIC_PRESETS: dict[str, SyntheticConfig] = {
    "synthetic-gamma0": _BASE,
    "synthetic-gamma2": replace_config(_BASE, deq_settings(jac_weight=2.0)),
    "synthetic-gamma4": replace_config(_BASE, deq_settings(jac_weight=4.0)),
    # CPU seconds, for tests: 512 pairs, 5 epochs of 128.
    "synthetic-tiny": replace_config(
        _BASE, dict(n_train=512, n_valid=128, epochs=5, batch_size=128, log_every=5, eval_every=10, save_every=10)
    ),
}
