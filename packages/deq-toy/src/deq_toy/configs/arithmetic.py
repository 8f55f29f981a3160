"""Presets of the nested-arithmetic sign-prediction study (the student report's settings and tiny CPU ones)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from deq_core.train.deq_config import DEQConfig, deq_section, deq_settings
from deq_core.train.run_config import replace_config

from .checks import check_at_least_one

MODELS = ("fc", "gru", "stacked_gru", "repeated_gru", "deq")


@dataclass(frozen=True)
class ArithmeticConfig:
    """One model trained to predict the sign of 31-symbol expressions.

    Data: files under DATA_DIR (generated when missing), variant ``variant`` for training and validation; the first
    ``n_train`` / ``n_valid`` / ``n_test`` rows of each file are used. Final evaluation on the test sets of every
    variant and on ``n_test`` expressions of ``long_length`` symbols (only for models whose readout does not depend
    on the length).
    Model: ``model`` with ``hidden`` units; ``readout`` "flatten" (all positions, as in the report) or "last" (the
    last position, length-independent). ``repeats`` cell applications for repeated_gru. For deq: ``deq``, a
    :class:`deq_core.train.deq_config.DEQConfig` (the :class:`deq_core.DEQ` layer, built by
    ``deq_toy.models.arithmetic_deq``): Anderson with m = 6 (``deq.solver_options``) to relative residual
    ``deq.tol`` in at most ``deq.max_iter`` iterations; ``deq.backward`` "implicit" (the adjoint system solved the same
    way to ``deq.backward_tol`` in ``deq.backward_max_iter``), "phantom" or "jfb"; ``deq.jac_weight`` > 0 adds the
    Jacobian regularizer with probability ``deq.jac_prob``.
    Training: Adam (``lr``), cosine schedule, ``epochs`` epochs of batch ``batch_size`` (``max_steps`` > 0 stops
    earlier, for a budget), gradient-norm clipping at ``grad_clip``, BCE with logits.
    """

    task: Literal["arithmetic"] = "arithmetic"
    model: Literal["fc", "gru", "stacked_gru", "repeated_gru", "deq"] = "deq"
    seed: int = 0
    data_seed: int = 0
    variant: Literal["four", "four_biased", "two", "two_biased"] = "four"
    length: int = 31
    long_length: int = 41
    n_train: int = 50000
    n_valid: int = 5000
    n_test: int = 5000
    hidden: int = 64
    readout: Literal["flatten", "last"] = "flatten"
    repeats: int = 50
    deq: DEQConfig = deq_section(
        solver="anderson", solver_options=("m=6",), max_iter=50, tol=1e-3, backward_solver="anderson",
        backward_options=("m=6",), backward_max_iter=50, backward_tol=1e-3,
    )  # fmt: skip
    epochs: int = 40
    max_steps: int = 0
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    log_every: int = 50
    eval_every: int = 0
    save_every: int = 500
    threads: int = 1

    def check(self) -> None:
        """Raise ValueError for values no run can use."""
        positive = (
            "length",
            "long_length",
            "n_train",
            "n_valid",
            "n_test",
            "hidden",
            "repeats",
            "epochs",
            "batch_size",
            "log_every",
            "save_every",
            "threads",
        )
        check_at_least_one(self, positive)
        if self.length % 2 == 0 or self.long_length % 2 == 0 or self.length < 3:
            raise ValueError(f"length and long_length must be odd and >= 3, got {self.length}, {self.long_length}")
        if self.lr <= 0 or self.grad_clip <= 0:
            raise ValueError("lr and grad_clip must be > 0")
        if self.model == "fc" and self.readout != "flatten":
            raise ValueError("model=fc always flattens its input; readout=last applies to the GRU models only")
        if self.max_steps < 0 or self.eval_every < 0:
            raise ValueError("max_steps and eval_every must be >= 0 (0: off / once per epoch)")


_REPORT = ArithmeticConfig()
_TINY = dict(
    n_train=128, n_valid=64, n_test=64, hidden=16, epochs=2, batch_size=32, repeats=5, log_every=2, eval_every=4,
    save_every=4, **deq_settings(max_iter=15, backward_max_iter=15),
)  # fmt: skip

ARITHMETIC_PRESETS: dict[str, ArithmeticConfig] = {}
for _name in MODELS:
    _key = _name.replace("_", "-")
    ARITHMETIC_PRESETS[f"arith-{_key}"] = replace_config(_REPORT, {"model": _name})
    ARITHMETIC_PRESETS[f"arith-{_key}-tiny"] = replace_config(_REPORT, {"model": _name, **_TINY})
_JAC = {"model": "deq", **deq_settings(jac_weight=1.0)}
ARITHMETIC_PRESETS["arith-deq-jac"] = replace_config(_REPORT, _JAC)
ARITHMETIC_PRESETS["arith-deq-jac-tiny"] = replace_config(_REPORT, {**_JAC, **_TINY})
