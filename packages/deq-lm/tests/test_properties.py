"""Property tests of the small pieces the models and the task are built from."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deq_lm.data import copy_memory_batch
from deq_lm.models.attention import relative_index, rotate_queries, rotated_positions, sinusoid_positions
from deq_lm.models.common import left_context


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 5), T=st.integers(1, 60), seed=st.integers(0, 2**31 - 1))
def test_copy_memory_layout_for_any_horizon(batch, T, seed):
    x, y = copy_memory_batch(batch, T, torch.Generator().manual_seed(seed))
    assert x.shape == y.shape == (batch, T + 20)
    assert ((x[:, :10] >= 1) & (x[:, :10] <= 8)).all()
    assert (x[:, 10 : T + 9] == 0).all() and (x[:, T + 9 :] == 9).all()  # blanks, then eleven markers
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
@given(q_len=st.integers(1, 12), mem=st.integers(0, 12), half=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_rotated_query_times_key_feature_is_the_distance_encoding(q_len, mem, half, seed):
    """The rotated attention's identity: a turned by the query's angles, dotted with key j's feature, is a . s(M + i
    - j), the encoding of their distance; and the allowed keys are those at or before the query."""
    k_len, dim = q_len + mem, 2 * half
    pos = rotated_positions(q_len, k_len, dim, torch.float64, torch.device("cpu"))
    a = torch.randn(1, q_len, 1, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    scores = rotate_queries(a, pos)[0, :, 0] @ pos.keys.T  # (q_len, k_len)
    distances = mem + torch.arange(q_len)[:, None] - torch.arange(k_len)[None, :]
    expected = (
        a[0, :, 0, None, :] * sinusoid_positions(distances.flatten(), dim, torch.float64).reshape(q_len, k_len, dim)
    ).sum(-1)
    torch.testing.assert_close(scores, expected, rtol=1e-12, atol=1e-12)
    causal = torch.ones(q_len, k_len, dtype=torch.bool).tril()  # what None (plain causal, K = L) stands for
    allowed = causal if pos.allowed is None else pos.allowed
    assert torch.equal(allowed, distances >= 0)


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
