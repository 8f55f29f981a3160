"""Presets of the nested-arithmetic sign-prediction study (the student report's settings and tiny CPU ones)."""

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

from .sections import ToyOptimConfig, ToyRunConfig

MODELS = ("fc", "gru", "stacked_gru", "repeated_gru", "deq")


@dataclass(frozen=True)
class ArithmeticDataConfig:
    """The arithmetic config's ``data`` section: files under DATA_DIR (generated when missing, from ``data_seed``),
    variant ``variant`` for training and validation, expressions of ``length`` symbols; the first ``n_train`` /
    ``n_valid`` / ``n_test`` rows of each file are used. The final evaluation takes the test sets of every variant
    and, for models whose readout does not depend on the length, ``n_test`` expressions of ``long_length`` symbols.
    ``task`` names the task ("arithmetic")."""

    task: Literal["arithmetic"] = "arithmetic"
    data_seed: int = 0
    variant: Literal["four", "four_biased", "two", "two_biased"] = "four"
    length: int = 31
    long_length: int = 41
    n_train: int = 50000
    n_valid: int = 5000
    n_test: int = 5000

    def __post_init__(self) -> None:
        with in_section("data"):
            check_finite(self)
            check_seed(self, "data_seed")
            check_choice(self, "task", "variant")
            check_at_least(self, 1, "length", "long_length", "n_train", "n_valid", "n_test")
            if self.length % 2 == 0 or self.long_length % 2 == 0 or self.length < 3:
                raise ValueError(f"length and long_length must be odd and >= 3, got {self.length}, {self.long_length}.")


@dataclass(frozen=True)
class ArithmeticModelConfig:
    """The arithmetic config's ``model`` section: the model ``name`` with ``hidden`` units; ``readout`` "flatten"
    (all positions, as in the report) or "last" (the last position, length-independent); ``repeats`` cell
    applications for repeated_gru."""

    name: Literal["fc", "gru", "stacked_gru", "repeated_gru", "deq"] = "deq"
    hidden: int = 64
    readout: Literal["flatten", "last"] = "flatten"
    repeats: int = 50

    def __post_init__(self) -> None:
        with in_section("model"):
            check_finite(self)
            check_choice(self, "name", "readout")
            check_at_least(self, 1, "hidden", "repeats")
            if self.name == "fc" and self.readout != "flatten":
                raise ValueError(
                    f"readout={self.readout} applies to the GRU models only (model fc flattens its input)."
                )


@dataclass(frozen=True)
class ArithmeticOptimConfig(ToyOptimConfig):
    """The arithmetic config's ``optim`` section: :class:`~deq_toy.configs.sections.ToyOptimConfig` plus
    ``max_steps``: stop after this many optimizer steps (0: after ``epochs``; the schedule spans the steps run)."""

    max_steps: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        with in_section("optim"):
            check_at_least(self, 0, "max_steps")


@dataclass(frozen=True)
class ArithmeticConfig:
    """One model trained to predict the sign of 31-symbol expressions.

    Sections (a setting's name is its dotted path, ``optim.lr``; a name only one section has may be given alone, and
    ``model=gru`` sets ``model.name``):
        data (:class:`ArithmeticDataConfig`): task, data_seed, variant, length, long_length, n_train, n_valid, n_test.
        model (:class:`ArithmeticModelConfig`): name (fc, gru, stacked_gru, repeated_gru, deq), hidden, readout,
            repeats.
        deq (:class:`deq_core.train.deq_config.DEQConfig`, the :class:`deq_core.DEQ` layer of model deq, built by
            ``deq_toy.models.arithmetic_deq``): Anderson with m = 6 (``deq.solver_options``) to relative residual
            ``deq.tol`` in at most ``deq.max_iter`` iterations; ``deq.backward`` "implicit" (the adjoint system solved
            the same way to ``deq.backward_tol`` in ``deq.backward_max_iter``), "phantom" or "jfb";
            ``deq.jac_weight`` > 0 adds the Jacobian regularizer with probability ``deq.jac_prob``.
        optim (:class:`ArithmeticOptimConfig`): Adam (``optim.lr``), cosine schedule, ``optim.epochs`` epochs of batch
            ``optim.batch_size`` (``optim.max_steps`` > 0 stops earlier, for a budget), gradient-norm clipping at
            ``optim.grad_clip``, BCE with logits.
        run (:class:`~deq_toy.configs.sections.ToyRunConfig`): seed, threads, logging and checkpoint periods;
            ``run.eval_every`` = 0 (the default) evaluates once per epoch.
    """

    data: ArithmeticDataConfig = section(ArithmeticDataConfig)
    model: ArithmeticModelConfig = section(ArithmeticModelConfig)
    deq: DEQConfig = deq_section(
        solver="anderson", solver_options=("m=6",), max_iter=50, tol=1e-3, backward_solver="anderson",
        backward_options=("m=6",), backward_max_iter=50, backward_tol=1e-3,
    )  # fmt: skip
    optim: ArithmeticOptimConfig = section(ArithmeticOptimConfig, batch_size=64, lr=1e-3, grad_clip=1.0, epochs=40)
    run: ToyRunConfig = section(ToyRunConfig, log_every=50, eval_every=0, save_every=500, keep_checkpoints=1)


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
