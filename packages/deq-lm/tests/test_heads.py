"""Adaptive input / adaptive softmax and the linear head: normalization, nll against the full log-probabilities,
weight tying, shapes, learning, and the errors for bad cutoffs and targets."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deq_lm.models.heads import (
    AdaptiveEmbedding,
    AdaptiveLogSoftmax,
    LinearHead,
    OutputHead,
    build_embedding_and_head,
    embedding_width,
)

V = 50
# (d_embed, d_proj, cutoffs, div_val): one cluster, equal and different widths, div_val 1, 2 and 4 (the WT103 pattern:
# no projection in cluster 0, projections in the tail clusters)
SETTINGS = [
    (16, 16, (), 1),
    (16, 12, (), 1),
    (16, 16, (10,), 1),
    (16, 12, (10, 25), 1),
    (16, 16, (10, 25), 2),
    (64, 64, (5, 20, 40), 4),
    (8, 12, (5, 20, 40), 2),
]


def _pair(d_embed, d_proj, cutoffs, div_val, tie):
    embedding = AdaptiveEmbedding(V, d_embed, d_proj, cutoffs, div_val)
    softmax = AdaptiveLogSoftmax(V, d_embed, d_proj, cutoffs, div_val, tie_with=embedding if tie else None)
    with torch.no_grad():  # biases and cluster weights away from their zero / small initialization
        for p in softmax.parameters():
            p.normal_(std=0.5)
    return embedding, softmax


def _all_clusters_targets(n):
    """Targets covering every id (so every cluster), then random ones."""
    return torch.cat([torch.arange(V), torch.randint(0, V, (n - V,))])


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("setting", SETTINGS)
def test_adaptive_probabilities_sum_to_one(float64, setting, tie):
    torch.manual_seed(0)
    _, softmax = _pair(*setting, tie)
    log_p = softmax.log_probs(3 * torch.randn(64, setting[1]))
    assert log_p.shape == (64, V)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(64), rtol=0, atol=1e-12)
    # the words of a tail cluster share its head probability: the clusters really are split as asked
    if setting[2]:
        c1 = setting[2][0]
        assert not torch.allclose(log_p[:, :c1].exp().sum(-1), torch.ones(64))


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("setting", SETTINGS)
def test_adaptive_nll_is_minus_log_probs_at_targets(float64, setting, tie):
    torch.manual_seed(1)
    _, softmax = _pair(*setting, tie)
    hidden = 3 * torch.randn(4, 30, setting[1])
    targets = _all_clusters_targets(120).view(4, 30)
    nll = softmax.nll(hidden, targets)
    assert nll.shape == (4, 30)
    expected = -softmax.log_probs(hidden).gather(-1, targets[..., None])[..., 0]
    torch.testing.assert_close(nll, expected, rtol=1e-12, atol=1e-12)
    # the gradients agree too (every cluster is hit, so every parameter gets one)
    grads = torch.autograd.grad(nll.sum(), list(softmax.parameters()))
    expected_grads = torch.autograd.grad(expected.sum(), list(softmax.parameters()))
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


def test_adaptive_nll_with_few_targets_per_cluster(float64):
    torch.manual_seed(2)
    _, softmax = _pair(16, 16, (10, 25), 2, tie=False)
    hidden = torch.randn(6, 16)
    # all in one tail cluster, all in the head, a single target in each tail cluster
    for targets in (torch.full((6,), 30), torch.arange(6), torch.tensor([0, 12, 3, 4, 49, 5])):
        expected = -softmax.log_probs(hidden).gather(1, targets[:, None])[:, 0]
        torch.testing.assert_close(softmax.nll(hidden, targets), expected)
    assert softmax.nll(torch.randn(0, 16), torch.zeros(0, dtype=torch.long)).shape == (0,)


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("d_embed", [8, 16])
def test_linear_head_nll_is_cross_entropy(float64, d_embed, tie):
    torch.manual_seed(3)
    embedding = nn.Embedding(V, d_embed)
    head = LinearHead(16, V, tie_with=embedding if tie else None)
    hidden = torch.randn(3, 7, 16)
    targets = torch.randint(0, V, (3, 7))
    logits = head.logits(hidden)
    assert logits.shape == (3, 7, V)
    expected = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none").view(3, 7)
    torch.testing.assert_close(head.nll(hidden, targets), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(head.log_probs(hidden).exp().sum(-1), torch.ones(3, 7))
    torch.testing.assert_close(
        head.nll(hidden, targets), -head.log_probs(hidden).gather(-1, targets[..., None])[..., 0]
    )
    if tie:
        assert head.weight is embedding.weight
        assert isinstance(head.proj, nn.Identity) == (d_embed == 16)
    else:
        assert head.weight.shape == (V, 16) and isinstance(head.proj, nn.Identity)
        assert set(head.state_dict()) == set(nn.Linear(16, V).state_dict())  # loads an nn.Linear head's weights


def test_tied_softmax_shares_the_embedding_parameters(float64):
    torch.manual_seed(4)
    setting = (16, 12, (10, 25), 2)
    tied = nn.ModuleList(_pair(*setting, tie=True))
    embedding, softmax = tied
    assert softmax.tied
    for i in range(3):
        assert softmax.tables[i].weight is embedding.tables[i].weight
        assert softmax.projections[i].weight is embedding.projections[i].weight
    emb_ids = {id(p) for p in embedding.parameters()}
    own = {name: p for name, p in softmax.named_parameters() if id(p) not in emb_ids}
    assert set(own) == {"biases.0", "biases.1", "biases.2", "cluster_weight", "cluster_bias"}

    untied = nn.ModuleList(_pair(*setting, tie=False))
    untied.load_state_dict(tied.state_dict())  # the same values, stored twice
    shared = sum(p.numel() for p in embedding.parameters())
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert count(tied) == count(untied) - shared

    tokens = _all_clusters_targets(80).view(4, 20)
    targets = tokens.roll(1, dims=1)

    def loss(pair):
        emb, soft = pair
        return soft.nll(torch.tanh(emb(tokens)), targets).sum()

    loss(tied).backward()
    loss(untied).backward()
    # the tied gradient is the sum of the embedding's and the softmax's, each counted once
    untied_emb, untied_soft = dict(untied[0].named_parameters()), dict(untied[1].named_parameters())
    for name, p in embedding.named_parameters():
        q_emb, q_soft = untied_emb[name], untied_soft[name]
        assert p.grad is not None and q_emb.grad.abs().sum() > 0 and q_soft.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, q_emb.grad + q_soft.grad, rtol=1e-10, atol=1e-12)
    for name, p in own.items():
        torch.testing.assert_close(p.grad, untied_soft[name].grad, rtol=1e-10, atol=1e-12)


def test_div_val_too_large_raises():
    with pytest.raises(ValueError, match="width d_embed // div_val\\*\\*3 = 0"):
        AdaptiveEmbedding(V, 32, 32, (10, 25, 40), 4)


def test_tying_needs_the_same_clusters():
    embedding = AdaptiveEmbedding(V, 16, 16, (10, 25), 2)
    with pytest.raises(ValueError, match="same vocab_size, d_embed, d_proj, cutoffs and div_val"):
        AdaptiveLogSoftmax(V, 16, 16, (10, 30), 2, tie_with=embedding)
    with pytest.raises(ValueError, match="same vocab_size, d_embed, d_proj, cutoffs and div_val"):
        AdaptiveLogSoftmax(V, 16, 16, (10, 25), 4, tie_with=embedding)
    with pytest.raises(ValueError, match="vocab_size=40"):
        LinearHead(16, 40, tie_with=nn.Embedding(V, 16))


@pytest.mark.parametrize("div_val", [1, 4])
def test_adaptive_embedding_shapes_and_scale(float64, div_val):
    torch.manual_seed(5)
    d_embed, d_proj, cutoffs = 32, 32, (10, 25)
    embedding = AdaptiveEmbedding(V, d_embed, d_proj, cutoffs, div_val)
    widths = [32, 32, 32] if div_val == 1 else [32, 8, 2]
    sizes = [b - a for a, b in zip((0, *cutoffs), (*cutoffs, V))]
    assert [t.weight.shape for t in embedding.tables] == [(s, w) for s, w in zip(sizes, widths)]
    for w, projection in zip(widths, embedding.projections):
        if w == d_proj:
            assert isinstance(projection, nn.Identity)
        else:
            assert projection.weight.shape == (d_proj, w)
    assert embedding_width(embedding) == d_proj

    tokens = torch.randint(0, V, (3, 11))
    out = embedding(tokens)
    assert out.shape == (3, 11, d_proj)
    # each vector is its cluster's projected table row, times sqrt(d_proj)
    bounds = (0, *cutoffs, V)
    for t, vector in zip(tokens.reshape(-1).tolist(), out.reshape(-1, d_proj)):
        i = sum(t >= c for c in cutoffs)
        row = embedding.tables[i].weight[t - bounds[i]]
        torch.testing.assert_close(vector, embedding.projections[i](row) * math.sqrt(d_proj))
    unscaled = AdaptiveEmbedding(V, d_embed, d_proj, cutoffs, div_val, scale=False)
    unscaled.load_state_dict(embedding.state_dict())
    torch.testing.assert_close(out, unscaled(tokens) * math.sqrt(d_proj))


def test_a_few_adam_steps_lower_the_adaptive_nll():
    """A bigram model (previous token -> adaptive input -> adaptive softmax) on a random bigram corpus."""
    torch.manual_seed(6)
    successor = torch.randperm(V)
    prev = torch.randint(0, V, (512,))
    noise = torch.rand(512) < 0.2
    nxt = torch.where(noise, torch.randint(0, V, (512,)), successor[prev])
    embedding, softmax = build_embedding_and_head("adaptive", V, 16, 16, cutoffs=(10, 25), div_val=2)
    params = list(nn.ModuleList([embedding, softmax]).parameters())
    optimizer = torch.optim.Adam(params, lr=3e-2)

    def nll() -> torch.Tensor:
        return softmax.nll(embedding(prev), nxt).mean()

    with torch.no_grad():
        before = float(nll())
    for _ in range(40):
        loss = nll()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        after = float(nll())
    assert after < 0.6 * before, (before, after)


def test_bf16_autocast_runs():
    torch.manual_seed(7)
    embedding, softmax = _pair(16, 12, (10, 25), 2, tie=True)
    tokens = _all_clusters_targets(60)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        nll = softmax.nll(embedding(tokens), tokens.roll(1))
    assert nll.shape == (60,) and torch.isfinite(nll).all()
    torch.testing.assert_close(nll.float(), softmax.nll(embedding(tokens), tokens.roll(1)), rtol=0.05, atol=0.05)


@pytest.mark.parametrize(
    ("cutoffs", "message"),
    [
        ((20, 10), "strictly increasing"),
        ((10, 10), "strictly increasing"),
        ((10, V), "strictly between 0 and vocab_size=50"),
        ((10, 80), r"\[80\]"),
        ((0, 10), "strictly between 0 and vocab_size"),
        ((-3,), r"\[-3\]"),
        ((2.5,), "integer"),
    ],
)
def test_bad_cutoffs_raise(cutoffs, message):
    with pytest.raises(ValueError, match=message):
        AdaptiveEmbedding(V, 16, 16, cutoffs, 2)
    with pytest.raises(ValueError, match=message):
        AdaptiveLogSoftmax(V, 16, 16, cutoffs, 2)
    with pytest.raises(ValueError, match=message):
        build_embedding_and_head("adaptive", V, 16, 16, cutoffs=cutoffs)


@pytest.mark.parametrize("bad", [-1, V, 1000])
def test_out_of_range_targets_raise(bad):
    torch.manual_seed(8)
    _, softmax = _pair(16, 16, (10, 25), 2, tie=False)
    targets = torch.tensor([0, 3, bad, 40])
    for head in (softmax, LinearHead(16, V)):
        with pytest.raises(ValueError, match=rf"targets must be token ids in \[0, 50\), but contain \[{bad}\]"):
            head.nll(torch.randn(4, 16), targets)
    with pytest.raises(ValueError, match=rf"tokens .* contain \[{bad}\]"):
        AdaptiveEmbedding(V, 16, 16, (10, 25), 2)(targets)


def test_bad_shapes_raise():
    _, softmax = _pair(16, 16, (10, 25), 2, tie=False)
    with pytest.raises(ValueError, match="same leading shape"):
        softmax.nll(torch.randn(4, 16), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 16\)"):
        softmax.log_probs(torch.randn(4, 12))
    with pytest.raises(ValueError, match="integer tensor"):
        softmax.nll(torch.randn(4, 16), torch.zeros(4))


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("kind", ["linear", "adaptive"])
def test_factory(kind, tie):
    torch.manual_seed(9)
    d_embed, d_hidden = 8, 12
    embedding, head = build_embedding_and_head(kind, V, d_embed, d_hidden, cutoffs=(10, 25), div_val=2, tie=tie)
    assert isinstance(head, OutputHead)
    width = embedding_width(embedding)
    assert width == (d_embed if kind == "linear" else d_hidden)
    body = nn.Linear(width, d_hidden)  # the body is sized by embedding_width
    tokens = torch.randint(0, V, (2, 5))
    assert head.nll(body(embedding(tokens)), tokens).shape == (2, 5)
    table = embedding.weight if kind == "linear" else embedding.tables[0].weight
    head_table = head.weight if kind == "linear" else head.tables[0].weight
    assert (head_table is table) == tie
    with pytest.raises(ValueError, match="kind must be one of"):
        build_embedding_and_head("sampled", V, d_embed, d_hidden)
    with pytest.raises(TypeError):
        embedding_width(nn.Linear(3, 4))
