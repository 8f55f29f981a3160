"""The expression generator, labels, files and the loader's errors (also for a value that would take hours to
build)."""

import ast
import random
from fractions import Fraction

import pytest
import torch

from deq_core.train.errors import UsageError
from deq_core.train.testing.faults import python_module
from deq_toy.data.arithmetic import (
    SYMBOLS,
    VARIANTS,
    evaluate_expression,
    generate_expression,
    generate_split,
    load_split,
    one_hot,
    to_indices,
    write_split,
)


def python_exact(text: str) -> Fraction:
    """Independent evaluator: Python's own parser (same precedence), every digit as a Fraction."""

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            ops = {
                ast.Add: lambda a, b: a + b,
                ast.Sub: lambda a, b: a - b,
                ast.Mult: lambda a, b: a * b,
                ast.Div: lambda a, b: a / b,
            }
            return ops[type(node.op)](left, right)
        raise AssertionError(f"unexpected syntax {ast.dump(node)} in {text!r}")

    return walk(ast.parse(text, mode="eval"))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_labels_match_independent_exact_evaluation(variant):
    data = generate_split(400, 31, variant, seed=3, split="test")
    assert len(data) == 400
    for text, value, label in zip(data.expressions, data.values, data.labels):
        assert len(text) == 31
        assert set(text) <= set(SYMBOLS)
        exact = python_exact(text)  # also checks that it parses
        assert exact == value
        assert label == (1 if exact > 0 else 0)


def test_variants_use_only_their_operators_and_bias():
    two = generate_split(300, 31, "two", seed=0, split="train")
    assert all(not set(e) & set("*/") for e in two.expressions)
    biased = "".join(generate_split(300, 31, "two_biased", seed=0, split="train").expressions)
    assert 2.3 < biased.count("-") / biased.count("+") < 3.8


def test_generation_is_deterministic_and_prefix_stable():
    a = generate_split(50, 31, "four", seed=1, split="train")
    b = generate_split(20, 31, "four", seed=1, split="train")
    c = generate_split(20, 31, "four", seed=2, split="train")
    assert a.expressions[:20] == b.expressions
    assert b.expressions != c.expressions


def test_division_by_zero_is_redrawn_and_zero_is_negative():
    with pytest.raises(ZeroDivisionError):
        evaluate_expression("4/(3-3)")
    assert evaluate_expression("2-2") == 0
    data = generate_split(3000, 31, "four", seed=0, split="valid")
    assert data.n_division_by_zero > 0  # some draws divided by zero and were replaced
    assert data.n_zero > 0
    assert all(lab == 0 for v, lab in zip(data.values, data.labels) if v == 0)


def test_longer_expressions_and_bad_lengths():
    rng = random.Random(0)
    text = generate_expression(41, rng)
    assert len(text) == 41 and python_exact(text) == evaluate_expression(text)
    with pytest.raises(ValueError, match="odd"):
        generate_expression(30, rng)


def test_roundtrip_and_one_hot(tmp_path):
    data = generate_split(30, 31, "four", seed=0, split="train")
    path = write_split(tmp_path / "x.tsv", data)
    back = load_split(path, length=31)
    assert back.expressions == data.expressions and back.values == data.values and back.labels == data.labels
    x = one_hot(to_indices(back.expressions))
    assert x.shape == (30, 31, len(SYMBOLS)) == (30, 31, 15)
    assert torch.equal(x.sum(-1), torch.ones(30, 31))


@pytest.mark.parametrize(
    "row, message",
    [
        ("1+2\t3", "3 tab-separated fields"),
        ("1+a\t3\t1", "outside"),
        ("1+2+3\t6\t1", "has 5 symbols, expected 3"),
        ("1+2\tthree\t1", "not an exact fraction"),
        ("1+2\t3.0\t1", "not an exact fraction"),
        ("1+2\t3e0\t1", "not an exact fraction"),
        ("1+2\t1234/1\t1", "not an exact fraction like -7/3 of at most 3 digits"),
        ("1+2\t3\t2", "not 0 or 1"),
        ("1-2\t-1\t1", "does not match the sign"),
    ],
)
def test_malformed_rows_are_named(tmp_path, row, message):
    path = tmp_path / "bad.tsv"
    path.write_text(f"expression\tvalue\tlabel\n1+1\t2\t1\n{row}\n")
    with pytest.raises(UsageError, match=message) as err:
        load_split(path, length=3)
    assert "line 3" in str(err.value)


def test_missing_header_missing_file_and_short_file(tmp_path):
    path = tmp_path / "nohead.tsv"
    path.write_text("1+1\t2\t1\n")
    with pytest.raises(UsageError, match="header"):
        load_split(path)
    with pytest.raises(UsageError, match="does not exist"):
        load_split(tmp_path / "none.tsv")
    short = write_split(tmp_path / "short.tsv", generate_split(5, 31))
    with pytest.raises(UsageError, match="has 5 rows but 10 are needed"):
        load_split(short, limit=10)


def test_a_value_with_an_exponent_is_one_line_at_once(tmp_path):
    """``1e999999999`` is a fraction to Python (10 ** 999999999, hours of work): training stops on it in one line."""
    data = tmp_path / "data"
    bad = data / "arith-seed0" / "four-train-len31.tsv"
    bad.parent.mkdir(parents=True)
    bad.write_text(f"expression\tvalue\tlabel\n{'1+' * 15}1\t1e999999999\t1\n")
    done = python_module("deq_toy.train", "--config", "arith-fc-tiny", "--data-dir", "data", "--output-dir", "run",
                         cwd=tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("python -m deq_toy.train: error: malformed arithmetic data file "), line
    assert f"{bad.relative_to(tmp_path)}, line 2: value '1e999999999' is not an exact fraction" in line, line
