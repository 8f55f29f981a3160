"""Data for the two tasks: the synthetic 1D regression set and the nested-arithmetic sign-prediction sets."""

from .arithmetic import (
    SYMBOLS,
    ArithmeticSplit,
    evaluate_expression,
    generate_expression,
    generate_split,
    load_split,
    one_hot,
    write_split,
)
from .synthetic import SyntheticData, make_synthetic, target_function

__all__ = [
    "SYMBOLS",
    "ArithmeticSplit",
    "SyntheticData",
    "evaluate_expression",
    "generate_expression",
    "generate_split",
    "load_split",
    "make_synthetic",
    "one_hot",
    "target_function",
    "write_split",
]
