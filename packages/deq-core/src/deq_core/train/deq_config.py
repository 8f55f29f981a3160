"""The ``deq`` section every task config shares: :class:`DEQConfig`, the DEQ layer's solvers, limits and backward
mode plus the DEQ training features (jittered limit, unrolled pretraining, Jacobian regularization), checked when
built, and turned into the layer (:meth:`DEQConfig.layer`) and the training skeleton's schedules. Solver options are
``key=value`` strings read by :func:`parse_options`.

On the command line its fields are dotted keys: ``deq.max_iter=12 deq.solver_options=m=6,beta=0.8``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..solve import check_max_iter, check_tol
from .checks import check_at_least, check_choice, check_finite, check_fraction, in_section
from .schedules import JacobianSchedule, PretrainSchedule
from .trust import import_path_field

if TYPE_CHECKING:
    from .. import DEQ

__all__ = [
    "MAX_ITER_LIMIT",
    "REFERENCE_STOP",
    "DEQConfig",
    "check_solver_field",
    "deq_section",
    "deq_settings",
    "parse_options",
]

MAX_ITER_LIMIT = 1000
"""The largest iteration limit of a training config (``deq.max_iter``, ``backward_max_iter``, ``eval_max_iter``): a
solve that never meets its tolerance runs to its limit at every step, so a larger limit is a typo that would not end.
The papers' limits are 12 to 50. :func:`deq_core.solve` itself takes any limit."""

_OPTION_FIELDS = (("solver_options", "solver"), ("backward_options", "backward_solver"))  # (options field, its solver)


@dataclass(frozen=True)
class DEQConfig:
    """A task config's DEQ settings (its ``deq`` section). Iteration limits count solver iterations (calls of f).

    Layer (:class:`deq_core.DEQ`):
        solver, solver_options: the forward solver: a built-in's shorthand (:data:`deq_core.BUILTIN_SOLVERS`) or
            the import path of a user's ``deq_core.Solver`` ("my_pkg.my_module:MySolver"), with its own options as
            ``key=value`` strings (``("m=6", "beta=0.8")`` for Anderson, ``("memory=10",)`` for Broyden), checked by
            the solver. Building the section imports the module of an import path; a config read from a file
            imports only the modules the user allows (:mod:`~deq_core.train.trust`).
        max_iter, tol, stop_mode: forward limits: at most ``max_iter`` iterations, converged when the "rel"
            (||f(z) - z|| / ||f(z)||) or "abs" residual is <= ``tol``. eval_max_iter, eval_tol: the limits in eval
            mode (None: the training ones). stop_over: "sample" (each sample's residual must meet tol) or "batch"
            (the residual of the whole batch, one norm: the reference DEQ code's rule), for the forward solve.
        backward: how gradients pass the fixed point: "implicit" (the adjoint system, solved by ``backward_solver``
            with ``backward_options`` to ``backward_tol`` / ``backward_stop_mode`` / ``backward_stop_over`` in
            ``backward_max_iter``),
            "phantom" (``phantom_steps`` damped steps of size ``phantom_damping``, backpropagated) or "jfb" (the
            gradient of the last call of f only).
        jacobian_samples: Hutchinson probes of the Jacobian term. on_nonfinite: "raise", "warn" or "ignore" when a
            sample's f turns NaN/Inf.
        check_every, backward_check_every: iterations between two host checks of whether a sample is still active,
            in the forward and the implicit backward solve (None: 1 on the CPU, 4 on other devices; see
            :func:`deq_core.solve`).
    Training (the skeleton's :class:`~deq_core.train.task.StepSchedule`):
        max_iter_jitter: each training step draws its forward limit uniformly from [max_iter - jitter, max_iter].
        pretrain_steps, pretrain_depth: the first ``pretrain_steps`` steps apply f ``pretrain_depth`` times with
            ordinary backpropagation (weight-tied unrolled pretraining).
        jac_weight, jac_prob, jac_growth, jac_every, jac_stop: Jacobian regularization with weight gamma
            ``jac_weight`` applied with probability ``jac_prob`` (in equilibrium steps), gamma += ``jac_growth``
            every ``jac_every`` steps counted from the end of pretraining, off from step ``jac_stop`` (0: never
            switched off).

    Every float setting must be a finite number (NaN and inf are refused when the section is built; no tolerance,
    weight or probability here means anything at infinity).
    """

    solver: str = import_path_field("anderson")
    solver_options: tuple[str, ...] = ()
    max_iter: int = 30
    tol: float = 1e-4
    stop_mode: Literal["rel", "abs"] = "rel"
    stop_over: Literal["sample", "batch"] = "sample"
    eval_max_iter: int | None = None
    eval_tol: float | None = None
    backward: Literal["implicit", "phantom", "jfb"] = "implicit"
    backward_solver: str = import_path_field("broyden")
    backward_options: tuple[str, ...] = ()
    backward_max_iter: int = 30
    backward_tol: float = 1e-6
    backward_stop_mode: Literal["rel", "abs"] = "rel"
    backward_stop_over: Literal["sample", "batch"] = "sample"
    phantom_steps: int = 5
    phantom_damping: float = 0.5
    jacobian_samples: int = 1
    on_nonfinite: Literal["raise", "warn", "ignore"] = "raise"
    check_every: int | None = None
    backward_check_every: int | None = None
    max_iter_jitter: int = 0
    pretrain_steps: int = 0
    pretrain_depth: int = 2
    jac_weight: float = 0.0
    jac_prob: float = 1.0
    jac_growth: float = 0.0
    jac_every: int = 0
    jac_stop: int = 0

    def __post_init__(self) -> None:
        with in_section("deq"):
            _check_deq_config(self)

    def layer_settings(self) -> dict[str, Any]:
        """Keyword arguments of :class:`deq_core.DEQ`: the forward solver object, limits, and the backward strategy
        (``deq_core.Implicit`` / ``Phantom`` / ``JFB``)."""
        from .. import JFB, Implicit, Phantom
        from .._solvers import resolve_solver

        settings: dict[str, Any] = dict(
            solver=resolve_solver(self.solver, parse_options(self.solver_options, "solver_options")),
            max_iter=self.max_iter, tol=self.tol, stop_mode=self.stop_mode, stop_over=self.stop_over,
            eval_max_iter=self.eval_max_iter, eval_tol=self.eval_tol, jacobian_samples=self.jacobian_samples,
            on_nonfinite=self.on_nonfinite, check_every=self.check_every,
        )  # fmt: skip
        if self.backward == "implicit":
            adjoint = resolve_solver(self.backward_solver, parse_options(self.backward_options, "backward_options"))
            settings["backward"] = Implicit(
                adjoint, self.backward_max_iter, self.backward_tol, self.backward_stop_mode, self.backward_stop_over,
                check_every=self.backward_check_every,
            )  # fmt: skip
        elif self.backward == "phantom":
            settings["backward"] = Phantom(steps=self.phantom_steps, damping=self.phantom_damping)
        else:
            settings["backward"] = JFB()
        return settings

    def layer(self, **extra: Any) -> DEQ:
        """The :class:`deq_core.DEQ` layer of these settings (``extra``: other arguments, e.g. warn_unconverged)."""
        from .. import DEQ

        return DEQ(**{**self.layer_settings(), **extra})

    def pretrain_schedule(self) -> PretrainSchedule:
        """The unrolled pretraining phase (``pretrain_steps`` steps of ``pretrain_depth`` applications of f)."""
        return PretrainSchedule(self.pretrain_steps, self.pretrain_depth)

    def jacobian_schedule(self, seed: int) -> JacobianSchedule:
        """The Jacobian-regularization schedule, its per-step draws seeded by ``seed`` (the run's seed)."""
        return JacobianSchedule(self.jac_weight, self.jac_prob, self.jac_growth, self.jac_every, seed=seed,
                                stop=self.jac_stop or None, start=self.pretrain_steps)  # fmt: skip


def _check_deq_config(config: DEQConfig) -> None:
    """Raise ValueError naming the first bad setting (its key without the ``deq.`` prefix) and the valid values."""
    check_finite(config)
    check_choice(
        config, "stop_mode", "stop_over", "backward_stop_mode", "backward_stop_over", "backward", "on_nonfinite"
    )
    for key in ("max_iter", "backward_max_iter", "eval_max_iter"):  # the layer's own rules (deq_core.solve)
        check_max_iter(getattr(config, key), key, optional=key == "eval_max_iter")
    for key in ("tol", "backward_tol", "eval_tol"):
        check_tol(getattr(config, key), key, optional=key == "eval_tol")
    limits = ("max_iter", "backward_max_iter") + (() if config.eval_max_iter is None else ("eval_max_iter",))
    check_at_least(config, 1, *limits)  # as every integer setting of a config: below INT_LIMIT
    for key in limits:
        if getattr(config, key) > MAX_ITER_LIMIT:
            raise ValueError(f"{key} must be at most {MAX_ITER_LIMIT} (a solve that never meets its tol runs to its "
                             f"limit at every step), got {getattr(config, key)}.")  # fmt: skip
    check_at_least(config, 1, "pretrain_depth", "phantom_steps", "jacobian_samples")
    check_at_least(config, 0, "max_iter_jitter", "pretrain_steps", "jac_weight", "jac_growth", "jac_every", "jac_stop")
    check_fraction(config, "jac_prob")
    for key in ("check_every", "backward_check_every"):
        value = getattr(config, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{key} must be an integer >= 1 or none (none: 1 on the CPU, 4 on other devices), got "
                             f"{value!r}.")  # fmt: skip
        if value is not None:
            check_at_least(config, 1, key)  # below INT_LIMIT
    if config.max_iter_jitter >= config.max_iter:
        raise ValueError(f"max_iter_jitter must be < max_iter ({config.max_iter}), got {config.max_iter_jitter}.")
    if not 0.0 < config.phantom_damping <= 1.0:
        raise ValueError(f"phantom_damping must be in (0, 1], got {config.phantom_damping}.")
    for options_field, solver_field in _OPTION_FIELDS:
        check_solver_field(config, solver_field, options_field)


def check_solver_field(config: Any, solver_field: str, options_field: str | None = None) -> None:
    """Check the field ``solver_field`` of the dataclass instance ``config`` as :class:`DEQConfig` checks its
    ``solver``: a built-in's shorthand (:data:`deq_core.BUILTIN_SOLVERS`) or the import path of a
    :class:`deq_core.Solver` (imported; make the field with :func:`~deq_core.train.trust.import_path_field`, so
    that a config read from a file imports only trusted modules), with the options of ``options_field`` (``key=value``
    strings; None: the solver's defaults), checked by the solver itself.

    Raises:
        ValueError: naming the field (``solver: unknown solver 'newton'; choose one of [...]``).
    """
    from .._solvers import resolve_solver

    try:
        resolve_solver(getattr(config, solver_field))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{solver_field}: {error}") from None
    if options_field is None:
        return
    options = parse_options(getattr(config, options_field), options_field)
    try:
        resolve_solver(getattr(config, solver_field), options)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{options_field}: {error}") from None


def parse_options(items: Iterable[str], what: str = "options") -> dict[str, Any]:
    """``("memory=10", "beta=0.5", "line_search=true")`` -> ``{"memory": 10, "beta": 0.5, "line_search": True}``:
    solver options given as ``key=value`` strings (a config field set on the command line, e.g.
    ``deq.backward_options=memory=10,line_search=true``). Values become int, float or bool when they read as one.

    Raises:
        ValueError: an item without ``=`` or a key given twice (``what`` names the field in the message).
    """
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = str(item).partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise ValueError(f"{what}: {item!r} is not of the form key=value (e.g. memory=10).")
        if key in options:
            raise ValueError(f"{what}: option {key!r} is given twice.")
        options[key] = _option_value(text)
    return options


def _option_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# How the reference DEQ code (locuslab/deq, locuslab/mdeq) stops its solves, forward and backward: when the residual of
# the whole batch, one norm over all samples, meets tol. Every preset that reproduces a paper uses it
# (``deq_settings(**REFERENCE_STOP, ...)``); deq-core's default stops each sample on its own residual.
REFERENCE_STOP: dict[str, str] = {"stop_over": "batch", "backward_stop_over": "batch"}


def deq_section(**defaults: Any) -> Any:
    """A ``deq: DEQConfig`` dataclass field whose default is ``DEQConfig(**defaults)`` (a task's own defaults)."""
    return dataclasses.field(default_factory=lambda: DEQConfig(**defaults))


def deq_settings(**settings: Any) -> dict[str, Any]:
    """``deq_settings(max_iter=12, jac_weight=0.4)`` -> ``{"deq.max_iter": 12, "deq.jac_weight": 0.4}``: DEQ
    settings as the dotted keys of a preset written as a dict (applied with
    :func:`~deq_core.train.run_config.replace_config`).

    Raises:
        ValueError: a name :class:`DEQConfig` has no field for (listing the valid names).
    """
    names = [f.name for f in dataclasses.fields(DEQConfig)]
    unknown = [k for k in settings if k not in names]
    if unknown:
        raise ValueError(f"unknown DEQ setting {unknown[0]!r}; valid names: {', '.join(names)}.")
    return {f"deq.{key}": value for key, value in settings.items()}
