"""deq-toy: the synthetic 1D Jacobian-regularization study and nested-arithmetic sign prediction with a GRU-cell DEQ.

Entry points: ``python -m deq_toy.train``, ``python -m deq_toy.evaluate``, ``python -m deq_toy.reproduce``.
"""

__version__ = "0.8.0"

__all__ = ["__version__"]
