"""Presets of the synthetic 1D study (Jacobian-regularization paper, section 5.1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from deq_core.train import (
    DEQConfig,
    check_at_least,
    check_choice,
    check_finite,
    check_seed,
    deq_section,
    deq_settings,
    in_section,
    replace_config,
    section,
)
from deq_core.train.deq_config import check_solver_field
from deq_core.train.trust import import_path_field

from .sections import ToyOptimConfig, ToyRunConfig


@dataclass(frozen=True)
class SyntheticDataConfig:
    """The synthetic config's ``data`` section: ``n_train`` / ``n_valid`` pairs (x, h(x) + noise), x ~ U[-2, 2],
    noise of standard deviation ``noise_std``, drawn with ``data_seed``. ``task`` names the task ("synthetic")."""

    task: Literal["synthetic"] = "synthetic"
    data_seed: int = 0
    n_train: int = 4096
    n_valid: int = 1000
    noise_std: float = 0.05

    def __post_init__(self) -> None:
        with in_section("data"):
            check_finite(self)
            check_seed(self, "data_seed")
            check_choice(self, "task")
            check_at_least(self, 1, "n_train", "n_valid")
            check_at_least(self, 0, "noise_std")


@dataclass(frozen=True)
class SyntheticModelConfig:
    """The synthetic config's ``model`` section: the 1D DEQ's ``width`` (4 x width parameters); ``feedback=False``
    fixes W1 at 0, so that f ignores z (the explicit network W2^T ReLU(U x + b), a reference)."""

    width: int = 50
    feedback: bool = True

    def __post_init__(self) -> None:
        with in_section("model"):
            check_finite(self)
            check_at_least(self, 1, "width")


@dataclass(frozen=True)
class SyntheticRunConfig(ToyRunConfig):
    """The synthetic config's ``run`` section: :class:`~deq_toy.configs.sections.ToyRunConfig` plus ``eval_solver``,
    the solver of the evaluation statistics (NFE and |df/dz| of plain fixed-point iteration by default). It takes what
    ``deq.solver`` takes: a built-in's shorthand (:data:`deq_core.BUILTIN_SOLVERS`) or the import path of a user's
    ``deq_core.Solver``, imported from a saved config only when trusted (``--trust-solver``), with its defaults."""

    eval_solver: str = import_path_field("fixed_point")

    def __post_init__(self) -> None:
        super().__post_init__()
        with in_section("run"):
            check_solver_field(self, "eval_solver")


@dataclass(frozen=True)
class SyntheticConfig:
    """The 1D DEQ f(z; x) = W2^T ReLU(W1 z + U x + b) trained to fit y = h(x) + noise.

    Sections (a setting's name is its dotted path, ``optim.lr``; a name only one section has may be given alone):
        data (:class:`SyntheticDataConfig`): task, data_seed, n_train, n_valid, noise_std.
        model (:class:`SyntheticModelConfig`): width, feedback.
        deq (:class:`deq_core.train.deq_config.DEQConfig`, which builds the :class:`deq_core.DEQ` layer): Broyden to
            residual |f(z) - z| <= ``deq.tol`` (``deq.stop_mode`` "abs"; "rel" divides by |f(z)|) in at most
            ``deq.max_iter`` iterations; ``deq.backward`` "implicit" (the adjoint system solved by Broyden to
            ``deq.backward_tol`` in ``deq.backward_max_iter``, "abs"), "phantom" or "jfb"; ``deq.on_nonfinite``
            "warn" leaves samples whose f turns NaN/Inf out of the gradient ("raise" stops, "ignore" is silent).
        optim (:class:`~deq_toy.configs.sections.ToyOptimConfig`): Adam with a cosine learning-rate schedule over
            ``optim.epochs`` passes of ``optim.batch_size`` pairs (400 x 16 steps: at the earlier 100 epochs the
            regularized models had not reached their plateau; see docs/deq-toy-results.md), loss MSE(z*, y) +
            deq.jac_weight * (df/dz at z*)^2 (Hutchinson estimate, ``deq.jacobian_samples`` probes).
        run (:class:`SyntheticRunConfig`): seed, threads, logging / evaluation / checkpoint periods; the evaluation
            statistics (NFE, |df/dz|) are measured with ``run.eval_solver`` at the layer's evaluation limits
            (``deq.eval_max_iter`` / ``deq.eval_tol``, else ``deq.max_iter`` / ``deq.tol``).
    """

    data: SyntheticDataConfig = section(SyntheticDataConfig)
    model: SyntheticModelConfig = section(SyntheticModelConfig)
    deq: DEQConfig = deq_section(
        solver="broyden", max_iter=100, tol=1e-3, stop_mode="abs", backward_solver="broyden", backward_max_iter=50,
        backward_tol=1e-6, backward_stop_mode="abs", on_nonfinite="warn",
    )  # fmt: skip
    optim: ToyOptimConfig = section(ToyOptimConfig, batch_size=256, lr=5e-3, epochs=400)
    run: SyntheticRunConfig = section(
        SyntheticRunConfig, log_every=20, eval_every=200, save_every=500, keep_checkpoints=1
    )


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
