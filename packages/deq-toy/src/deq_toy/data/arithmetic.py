"""Nested arithmetic expressions labelled by the sign of their exact value.

An expression is a string of exactly ``length`` symbols (31 by default) over the 15 symbols ``123456789+-*/()``,
following the grammar (standard precedence, left associative, no unary minus)::

    expr := term (("+" | "-") term)*      term := atom (("*" | "/") atom)*      atom := digit | "(" expr ")"

Values are computed exactly with :class:`fractions.Fraction`. Conventions:

- label 1 when the value is > 0, label 0 otherwise (a value of exactly 0 is labelled negative; the generator
  counts them in :attr:`ArithmeticSplit.n_zero`);
- an expression whose evaluation divides by zero (e.g. ``4/(3-3)``) is discarded and a new one is drawn; the
  number discarded is :attr:`ArithmeticSplit.n_division_by_zero`.

Variants change the operator frequencies: ``four`` (+ - * / equally likely), ``four_biased`` ('-' three times as
likely as each other operator), ``two`` (only + and -), ``two_biased`` ('-' three times as likely as '+').

Files are tab-separated text: a comment line, the header ``expression<TAB>value<TAB>label``, then one row per
expression with the value as ``p/q`` (or ``p``). :func:`load_split` checks every row and names the line of an error;
a value is read only as written so (digits, no exponent: ``1e999999999`` would take hours to build), with at most as
many digits above and below the line as its expression has symbols (the exact value of an expression of L symbols has
fewer).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import torch
from torch import Tensor

from deq_core.train import UsageError
from deq_core.train.files import write_text

DIGITS = "123456789"
OPERATORS = "+-*/"
SYMBOLS = DIGITS + OPERATORS + "()"
SYMBOL_INDEX = {s: i for i, s in enumerate(SYMBOLS)}
HEADER = "expression\tvalue\tlabel"
_VALUE = re.compile(r"-?([0-9]+)(?:/([0-9]+))?")  # p or p/q, as str(Fraction) writes it

VARIANTS: dict[str, dict[str, float]] = {
    "four": {"+": 1.0, "-": 1.0, "*": 1.0, "/": 1.0},
    "four_biased": {"+": 1.0, "-": 3.0, "*": 1.0, "/": 1.0},
    "two": {"+": 1.0, "-": 1.0},
    "two_biased": {"+": 1.0, "-": 3.0},
}
WRAP_PROBABILITY = 0.3  # chance that a sub-expression on the left of an operator is put in parentheses
DIGIT_OPERAND_PROBABILITY = 0.5  # chance that the right operand of an operator is a single digit


# ----------------------------------------------------------------------------------------------------- evaluation


class _Parser:
    """Recursive-descent parser and exact evaluator of one expression string."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-") and self.peek():
            op = self.text[self.pos]
            self.pos += 1
            right = self.term()
            value = value + right if op == "+" else value - right
        return value

    def term(self) -> Fraction:
        value = self.atom()
        while self.peek() in ("*", "/") and self.peek():
            op = self.text[self.pos]
            self.pos += 1
            right = self.atom()
            value = value * right if op == "*" else value / right  # Fraction / 0 raises ZeroDivisionError
        return value

    def atom(self) -> Fraction:
        char = self.peek()
        if char and char in DIGITS:
            self.pos += 1
            return Fraction(int(char))
        if char == "(":
            self.pos += 1
            value = self.expr()
            if self.peek() != ")":
                raise ValueError(f"expected ')' at position {self.pos} of {self.text!r}")
            self.pos += 1
            return value
        raise ValueError(f"expected a digit 1-9 or '(' at position {self.pos} of {self.text!r}, got {char!r}")


def evaluate_expression(text: str) -> Fraction:
    """Exact value of an expression string.

    Raises:
        ValueError: the string is not an expression of the grammar in the module docstring.
        ZeroDivisionError: the evaluation divides by zero.
    """
    parser = _Parser(text)
    value = parser.expr()
    if parser.pos != len(text):
        raise ValueError(f"unexpected {text[parser.pos]!r} at position {parser.pos} of {text!r}")
    return value


def sign_label(value: Fraction) -> int:
    """1 for a positive value, 0 for a negative value or exactly 0."""
    return 1 if value > 0 else 0


# ----------------------------------------------------------------------------------------------------- generation


def _choose_operator(rng: random.Random, weights: dict[str, float]) -> str:
    ops = list(weights)
    return rng.choices(ops, weights=[weights[o] for o in ops])[0]


def _operand(length: int, rng: random.Random, weights: dict[str, float]) -> str:
    """A digit (length 1) or a parenthesized expression of ``length`` symbols (length >= 5)."""
    if length == 1:
        return rng.choice(DIGITS)
    return "(" + _expr(length - 2, rng, weights, allow_wrap=False) + ")"


def _expr(length: int, rng: random.Random, weights: dict[str, float], allow_wrap: bool) -> str:
    """An expression of exactly ``length`` symbols (odd, >= 1); no doubled parentheses like ``((...))``."""
    if length == 1:
        return rng.choice(DIGITS)
    if allow_wrap and length >= 5 and rng.random() < WRAP_PROBABILITY:
        return "(" + _expr(length - 2, rng, weights, allow_wrap=False) + ")"
    # expr(length) = expr(a) op operand(b), a + 1 + b = length, operand lengths are 1 or >= 5 (odd).
    long_operands = list(range(5, length - 1, 2))
    if long_operands and rng.random() >= DIGIT_OPERAND_PROBABILITY:
        right = rng.choice(long_operands)
    else:
        right = 1
    left = length - 1 - right
    return _expr(left, rng, weights, allow_wrap=True) + _choose_operator(rng, weights) + _operand(right, rng, weights)


def generate_expression(length: int, rng: random.Random, variant: str = "four") -> str:
    """One random expression of exactly ``length`` symbols (``length`` odd and >= 3) of the given variant."""
    check_variant(variant)
    if length < 3 or length % 2 == 0:
        raise ValueError(f"expression length must be odd and >= 3 (every expression has odd length), got {length}.")
    return _expr(length, rng, VARIANTS[variant], allow_wrap=False)


def check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise UsageError(f"unknown arithmetic variant {variant!r}; choose one of {sorted(VARIANTS)}.")


@dataclass
class ArithmeticSplit:
    """One set of expressions with exact values and sign labels.

    Attributes:
        expressions: strings of ``length`` symbols each.
        values: exact values.
        labels: 1 for value > 0, else 0.
        n_zero: how many values are exactly 0 (labelled 0); computed from ``values``.
        n_division_by_zero: expressions discarded while generating because they divide by zero (0 when loaded).
    """

    expressions: list[str]
    values: list[Fraction]
    labels: list[int]
    n_division_by_zero: int = 0
    meta: str = field(default="")

    @property
    def n_zero(self) -> int:
        return sum(1 for v in self.values if v == 0)

    @property
    def length(self) -> int:
        return len(self.expressions[0]) if self.expressions else 0

    def __len__(self) -> int:
        return len(self.expressions)


def split_seed(seed: int, variant: str, split: str, length: int) -> str:
    """The string that seeds the generator of one file (stable across Python versions and processes)."""
    return f"deq-toy-arithmetic/{seed}/{variant}/{split}/{length}"


def generate_split(
    n: int, length: int = 31, variant: str = "four", seed: int = 0, split: str = "train"
) -> ArithmeticSplit:
    """Draw ``n`` expressions, deterministic by (seed, variant, split, length); division-by-zero draws are redrawn."""
    check_variant(variant)
    rng = random.Random(split_seed(seed, variant, split, length))
    expressions, values, labels, rejected = [], [], [], 0
    while len(expressions) < n:
        text = generate_expression(length, rng, variant)
        try:
            value = evaluate_expression(text)
        except ZeroDivisionError:
            rejected += 1
            continue
        expressions.append(text)
        values.append(value)
        labels.append(sign_label(value))
    meta = f"variant={variant} split={split} length={length} seed={seed}"
    return ArithmeticSplit(expressions, values, labels, rejected, meta)


# ----------------------------------------------------------------------------------------------------- files


def write_split(path: str | Path, data: ArithmeticSplit) -> Path:
    """Write ``data`` as a tab-separated file (see the module docstring); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# deq-toy nested arithmetic {data.meta} division_by_zero_redrawn={data.n_division_by_zero}", HEADER]
    lines += [f"{e}\t{v}\t{lab}" for e, v, lab in zip(data.expressions, data.values, data.labels)]
    return write_text(path, "\n".join(lines) + "\n", option="--data-dir")


def _malformed(path: Path, number: int, what: str) -> UsageError:
    return UsageError(
        f"malformed arithmetic data file {path}, line {number}: {what}. Each row must be "
        "'expression<TAB>value<TAB>label' (value an exact fraction p/q, label 1 if value > 0 else 0). "
        "Fix the file, or delete it and rerun to regenerate it."
    )


def _value(text: str, digits: int) -> Fraction | None:
    """The fraction ``text`` (``p`` or ``p/q``, each of at most ``digits`` digits), or None when it is not one."""
    match = _VALUE.fullmatch(text)
    if match is None or any(len(part) > digits for part in match.groups() if part is not None):
        return None
    try:
        return Fraction(text)
    except ZeroDivisionError:
        return None


def load_split(path: str | Path, length: int | None = None, limit: int | None = None) -> ArithmeticSplit:
    """Read and check a file written by :func:`write_split`.

    Args:
        path: the file.
        length: if given, every expression must have exactly this many symbols.
        limit: read only the first ``limit`` rows (the file must have at least that many).

    Raises:
        UsageError: missing file, text that is not UTF-8, bad header, a row with the wrong number of fields, an
            unknown symbol, a wrong length, a value that is not a fraction, a label other than 0/1 or not matching
            the value's sign, or fewer rows than ``limit``. The message names the line.
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f"arithmetic data file {path} does not exist; run training with --data-dir pointing to a "
            "writable folder and the files are generated there."
        )
    data = path.read_bytes()
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise _malformed(path, data.count(b"\n", 0, err.start) + 1, f"not UTF-8 text (byte {err.start})") from None
    body = [(i + 1, line) for i, line in enumerate(lines) if not line.startswith("#")]
    if not body or body[0][1].strip() != HEADER:
        raise _malformed(path, body[0][0] if body else 1, f"expected the header {HEADER!r}")
    meta = lines[0][1:].strip() if lines and lines[0].startswith("#") else ""
    expressions, values, labels = [], [], []
    for number, line in body[1:]:
        if limit is not None and len(expressions) >= limit:
            break
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise _malformed(path, number, f"expected 3 tab-separated fields, got {len(fields)}")
        text, value_text, label_text = fields
        bad = sorted(set(text) - set(SYMBOLS))
        if bad:
            raise _malformed(path, number, f"expression {text!r} has symbols {bad} outside {SYMBOLS!r}")
        if length is not None and len(text) != length:
            raise _malformed(path, number, f"expression {text!r} has {len(text)} symbols, expected {length}")
        value = _value(value_text, len(text))
        if value is None:
            shown = repr(value_text) if len(value_text) <= 40 else repr(value_text[:40]) + "..."
            raise _malformed(path, number, f"value {shown} is not an exact fraction like -7/3 of at most {len(text)} "
                             "digits above and below the line (as many as its expression has symbols)")  # fmt: skip
        if label_text not in ("0", "1"):
            raise _malformed(path, number, f"label {label_text!r} is not 0 or 1")
        if int(label_text) != sign_label(value):
            raise _malformed(path, number, f"label {label_text} does not match the sign of the value {value_text}")
        expressions.append(text)
        values.append(value)
        labels.append(int(label_text))
    if not expressions:
        raise _malformed(path, len(lines), "the file has no rows")
    if length is None and len({len(e) for e in expressions}) > 1:
        raise _malformed(path, body[1][0], "expressions have different lengths")
    if limit is not None and len(expressions) < limit:
        raise UsageError(
            f"arithmetic data file {path} has {len(expressions)} rows but {limit} are needed; delete it (it is "
            "regenerated with enough rows) or point --data-dir to another folder."
        )
    return ArithmeticSplit(expressions, values, labels, 0, meta)


def ensure_split(path: str | Path, n: int, length: int, variant: str, seed: int, split: str) -> ArithmeticSplit:
    """Load the first ``n`` rows of ``path``, generating and writing the file first when it does not exist."""
    path = Path(path)
    if not path.exists():
        write_split(path, generate_split(n, length, variant, seed, split))
    return load_split(path, length=length, limit=n)


# ----------------------------------------------------------------------------------------------------- tensors


def to_indices(expressions: list[str]) -> Tensor:
    """Symbol indices, LongTensor (N, T); all expressions must have the same length T."""
    return torch.tensor([[SYMBOL_INDEX[c] for c in e] for e in expressions], dtype=torch.long)


def one_hot(indices: Tensor) -> Tensor:
    """One-hot float32 encoding (..., T, 15) of symbol indices (..., T)."""
    return torch.nn.functional.one_hot(indices, num_classes=len(SYMBOLS)).float()
