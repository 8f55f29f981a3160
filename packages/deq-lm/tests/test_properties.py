"""Property tests of the small pieces the models and the task are built from."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deq_lm.data import copy_memory_batch
from deq_lm.models.attention import relative_index
from deq_lm.models.common import left_context


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 5), T=st.integers(1, 60), seed=st.integers(0, 2**31 - 1))
def test_copy_memory_layout_for_any_horizon(batch, T, seed):
    x, y = copy_memory_batch(batch, T, torch.Generator().manual_seed(seed))
    assert x.shape == y.shape == (batch, T + 20)
    assert ((x[:, :10] >= 1) & (x[:, :10] <= 8)).all()
    assert (x[:, 10:] != 0).sum() == batch  # exactly one non-blank (the marker) after the symbols
    assert (x[:, T + 9] == 9).all()
    assert torch.equal(y[:, -10:], x[:, :10]) and (y[:, :-10] == 0).all()


@settings(max_examples=60, deadline=None)
@given(q_len=st.integers(1, 12), mem=st.integers(0, 12))
def test_relative_index_points_at_the_distance(q_len, mem):
    k_len = q_len + mem
    index, future = relative_index(q_len, k_len, torch.device("cpu"))
    distances = torch.arange(k_len - 1, -1, -1)  # the order of the encodings
    for i in range(q_len):
        for j in range(k_len):
            assert bool(future[i, j]) == (j > mem + i)
            if not future[i, j]:
                assert int(distances[index[i, j]]) == mem + i - j


@settings(max_examples=40, deadline=None)
@given(length=st.integers(1, 6), hist=st.integers(0, 6), size=st.integers(0, 5))
def test_left_context_keeps_the_last_history_positions(length, hist, size):
    x = torch.arange(length, dtype=torch.float32).reshape(1, length, 1) + 100
    history = torch.arange(hist, dtype=torch.float32).reshape(1, hist, 1) + 1 if hist else None
    out = left_context(x, history, size)
    assert out.shape == (1, size + length, 1)
    assert torch.equal(out[:, size:], x)
    kept = min(hist, size)
    expected = [0.0] * (size - kept) + [float(v) for v in range(hist - kept + 1, hist + 1)]
    assert out[0, :size, 0].tolist() == expected
