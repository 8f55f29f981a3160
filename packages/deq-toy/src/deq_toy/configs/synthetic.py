"""Presets of the synthetic 1D study (Jacobian-regularization paper, section 5.1)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from deq_core.train.checks import check_choice

from .checks import check_at_least_one, check_damping


@dataclass(frozen=True)
class SyntheticConfig:
    """The 1D DEQ f(z; x) = W2^T ReLU(W1 z + U x + b) trained to fit y = h(x) + noise.

    Training: Adam with a cosine learning-rate schedule over ``epochs`` passes of ``batch_size`` pairs (400 x 16
    steps: at the earlier 100 epochs the regularized models had not reached their plateau; see README), loss
    MSE(z*, y) + jacobian_weight * (df/dz at z*)^2 (Hutchinson estimate, ``jacobian_samples`` probes).
    Solver (the :class:`deq_core.DEQ` layer, built by ``deq_core.train.deq_settings.deq_layer_settings``): ``solver`` to
    residual |f(z) - z| <= ``tol`` (``stop_mode`` "abs"; "rel" divides by |f(z)|) in at most ``max_iter`` iterations.
    ``backward``: "implicit" (the adjoint system solved by Broyden to ``backward_tol`` in ``backward_max_iter``, by
    ``backward_stop_mode``), "phantom" (``phantom_steps`` damped steps of size ``phantom_damping``, backpropagated)
    or "jfb" (the gradient of the last call of f only). ``on_nonfinite``: "warn" leaves samples whose f turns NaN/Inf
    out of the gradient, "raise" stops, "ignore" is silent.
    Evaluation statistics (NFE, |df/dz|) are measured with ``eval_solver`` at ``tol``.
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
    jacobian_weight: float = 0.0
    jacobian_samples: int = 1
    feedback: bool = True
    epochs: int = 400
    batch_size: int = 256
    lr: float = 5e-3
    weight_decay: float = 0.0
    solver: Literal["fixed_point", "anderson", "broyden"] = "broyden"
    eval_solver: Literal["fixed_point", "anderson", "broyden"] = "fixed_point"
    max_iter: int = 100
    tol: float = 1e-3
    stop_mode: Literal["rel", "abs"] = "abs"
    backward: Literal["implicit", "phantom", "jfb"] = "implicit"
    backward_max_iter: int = 50
    backward_tol: float = 1e-6
    backward_stop_mode: Literal["rel", "abs"] = "abs"
    phantom_steps: int = 5
    phantom_damping: float = 0.5
    on_nonfinite: Literal["raise", "warn", "ignore"] = "warn"
    log_every: int = 20
    eval_every: int = 200
    checkpoint_every: int = 500
    threads: int = 1

    def check(self) -> None:
        """Raise ValueError for values no run can use."""
        positive = (
            "n_train",
            "n_valid",
            "width",
            "jacobian_samples",
            "epochs",
            "batch_size",
            "max_iter",
            "backward_max_iter",
            "phantom_steps",
            "log_every",
            "eval_every",
            "checkpoint_every",
            "threads",
        )
        check_at_least_one(self, positive)
        check_choice(self, "stop_mode", "backward", "backward_stop_mode", "on_nonfinite")
        check_damping(self.phantom_damping)
        if self.jacobian_weight < 0 or self.lr <= 0 or self.tol <= 0 or self.noise_std < 0:
            raise ValueError("jacobian_weight and noise_std must be >= 0, lr and tol > 0")


_BASE = SyntheticConfig()

SYNTHETIC_PRESETS: dict[str, SyntheticConfig] = {
    "synthetic-gamma0": _BASE,
    "synthetic-gamma2": dataclasses.replace(_BASE, jacobian_weight=2.0),
    "synthetic-gamma4": dataclasses.replace(_BASE, jacobian_weight=4.0),
    # CPU seconds, for tests: 512 pairs, 5 epochs of 128.
    "synthetic-tiny": dataclasses.replace(
        _BASE, n_train=512, n_valid=128, epochs=5, batch_size=128, log_every=5, eval_every=10, checkpoint_every=10
    ),
}
