"""What every DEQ layer of a model does on one step, set from outside the model: :class:`Plan` and
:func:`use_plan`.

A training loop decides per step whether the DEQ solves or is unrolled (pretraining), with which forward iteration
limit (a jittered one) and whether the Jacobian term is computed; an evaluation may solve to other limits than the
layer's (a sweep of the iteration limit or the tolerance). Rather than threading these through every model's forward,
or changing the layer's own limits, it hands one :class:`Plan` to every :class:`~deq_core.DEQ` layer of the model for
the duration of the step::

    with deq_core.use_plan(model, deq_core.Plan(unroll=2)):   # every DEQ layer of model unrolls f twice
        out = model(x)
    with deq_core.use_plan(model, deq_core.Plan(max_iter=8, tol=1e-3)):   # an evaluation at other limits
        out = model(x)

The layers read it in their forward; outside the ``with`` block they use their own limits again. Nothing global is
set: the plan is an attribute of the layers found in ``model.modules()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from torch import nn

from .solve import check_max_iter, check_tol

__all__ = ["Plan", "use_plan"]


@dataclass(frozen=True)
class Plan:
    """The per-step choices of a DEQ layer (each None / False: the layer's own behaviour).

    Attributes:
        unroll: apply f this many times with ordinary backpropagation instead of solving (weight-tied pretraining);
            None: solve.
        max_iter: the forward iteration limit of this step (e.g. a jittered one, or an evaluation's hard stop);
            None: the layer's own limit (``max_iter``, or ``eval_max_iter`` in eval mode).
        jacobian_loss: also compute ``info.jacobian_loss``, the Hutchinson estimate of ||J_f(z*)||_F^2 / D.
        tol: the forward solve's tolerance in this step; None: the layer's own (``tol``, or ``eval_tol`` in eval
            mode).

    ``max_iter`` and ``tol`` follow the rules of the layer's own limits (an int >= 1, a finite number > 0).
    """

    unroll: int | None = None
    max_iter: int | None = None
    jacobian_loss: bool = False
    tol: float | None = None

    def __post_init__(self) -> None:
        if self.unroll is not None and (
            isinstance(self.unroll, bool) or not isinstance(self.unroll, int) or self.unroll < 1
        ):
            raise ValueError(f"Plan.unroll must be an int >= 1 or None, got {self.unroll!r}.")
        check_max_iter(self.max_iter, "Plan.max_iter", optional=True)
        check_tol(self.tol, "Plan.tol", optional=True)
        if not isinstance(self.jacobian_loss, bool):
            raise TypeError(f"Plan.jacobian_loss must be True or False, got {self.jacobian_loss!r}.")


@contextlib.contextmanager
def use_plan(model: nn.Module, plan: Plan | None) -> Iterator[int]:
    """Within the block, every :class:`~deq_core.DEQ` layer in ``model.modules()`` follows ``plan`` (None: its own
    settings); on exit each gets back the plan it had. Yields the number of DEQ layers found.

    Arguments given in a call of the layer (``deq(f, z0, max_iter=...)``) take precedence over the plan.
    """
    from .layer import DEQ

    if plan is not None and not isinstance(plan, Plan):
        raise TypeError(f"plan must be a deq_core.Plan or None, got {type(plan).__name__}.")
    layers = [m for m in model.modules() if isinstance(m, DEQ)]
    saved = [layer.plan for layer in layers]
    for layer in layers:
        layer.plan = plan
    try:
        yield len(layers)
    finally:
        for layer, previous in zip(layers, saved):
            layer.plan = previous
