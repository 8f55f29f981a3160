"""Input embeddings and output softmaxes for word-level language modeling.

- :class:`AdaptiveEmbedding`: adaptive input (Baevski & Auli, 2019). The vocabulary, sorted by frequency, is cut
  into clusters ``[0, c1), [c1, c2), ..., [ck, V)``; cluster i has a table of width ``d_embed // div_val**i`` and a
  projection up to ``d_proj``. Transformer-XL and the DEQ paper's WikiText-103 models use ``div_val=4``,
  ``d_embed = d_model = 700`` and cutoffs ``(20000, 40000, 200000)``.
- :class:`AdaptiveLogSoftmax`: adaptive softmax (Grave et al., 2017) over the same clusters. With ``tie_with`` its
  word tables and projections are the embedding's own Parameters.
- :class:`LinearHead`: the plain softmax, optionally tied to an ``nn.Embedding`` (the PTB models).
- :class:`OutputHead`: what the training loop needs from either softmax (``log_probs`` and ``nll``).
- :func:`build_embedding_and_head` and :func:`embedding_width`: for the model builder.

The projection of cluster i is one matrix ``P_i`` of shape (d_proj, width_i), stored as the weight of an
``nn.Linear(width_i, d_proj, bias=False)`` (an ``nn.Identity`` when ``width_i == d_proj``). The embedding maps a
table row ``e`` up to ``P_i e``; the softmax maps a hidden state ``h`` down to ``P_i^T h``, so tying the projections
shares ``P_i`` itself.

Differences from the Transformer-XL / DEQ reference code: cluster i has no projection at all when its width already
equals ``d_proj`` (the reference code keeps a square one in every cluster when ``div_val > 1``), and with
``div_val == 1`` every cluster has its own table and projection (the reference code shares one of each). The head's
cluster tokens are in cluster order: column ``c1 + i - 1`` of the head stands for tail cluster i.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@runtime_checkable
class OutputHead(Protocol):
    """A softmax over the vocabulary on top of the body's hidden states.

    Both methods are differentiable with respect to the hidden states and the head's parameters.
    """

    def log_probs(self, hidden: Tensor) -> Tensor:
        """Full log-probabilities, (..., d_hidden) -> (..., V) (forms the whole (N, V) matrix: for tests, evaluation
        of small vocabularies, or sampling)."""
        ...

    def nll(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Per-token negative log-likelihood in nats: hidden (..., d_hidden), targets (...) LongTensor -> (...).

        Raises:
            ValueError: a target outside [0, V), or shapes that do not match.
        """
        ...

    def predict(self, hidden: Tensor, targets: Tensor | None = None) -> tuple[Tensor | None, Tensor | None]:
        """What a model returns for hidden (..., d_hidden): (logits (..., V) when the head forms them cheaply, else
        None; the per-token NLL (...) when ``targets`` (...) are given, else None)."""
        ...


# --------------------------------------------------------------------------------------------------------------------
# Clusters


@dataclass(frozen=True)
class ClusterLayout:
    """How the vocabulary is split: cluster i holds the ids ``[bounds[i], bounds[i + 1])`` and has width
    ``widths[i]``; every cluster is projected to (or from) ``d_proj``."""

    bounds: tuple[int, ...]
    widths: tuple[int, ...]
    d_proj: int

    @classmethod
    def build(cls, vocab_size: int, d_embed: int, d_proj: int, cutoffs: Sequence[int], div_val: int) -> ClusterLayout:
        """Check the arguments of the adaptive modules and lay out the clusters.

        Raises:
            ValueError: non-positive sizes, cutoffs that are not strictly increasing ids in (0, vocab_size), or a
                div_val that leaves a cluster with width 0.
        """
        for name, value in (("vocab_size", vocab_size), ("d_embed", d_embed), ("d_proj", d_proj), ("div_val", div_val)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        try:
            cuts = [operator.index(c) for c in cutoffs]
        except TypeError:
            raise ValueError(f"cutoffs must be integer token ids, got {list(cutoffs)!r}.") from None
        outside = [c for c in cuts if not 0 < c < vocab_size]
        if outside:
            raise ValueError(
                f"cutoffs must lie strictly between 0 and vocab_size={vocab_size} (the clusters are [0, c1), "
                f"[c1, c2), ..., [ck, vocab_size), none of them empty); {outside} in {cuts} do not. Drop these "
                "cutoffs, or check that vocab_size is the size of the vocabulary the data was tokenized with."
            )
        if any(b <= a for a, b in zip(cuts, cuts[1:])):
            raise ValueError(f"cutoffs must be strictly increasing, got {cuts}: sort them and remove duplicates.")
        widths = tuple(d_embed // div_val**i for i in range(len(cuts) + 1))
        if widths[-1] < 1:
            raise ValueError(
                f"with d_embed={d_embed} and div_val={div_val}, cluster {len(cuts)} would have width "
                f"d_embed // div_val**{len(cuts)} = 0: lower div_val, use fewer cutoffs or widen d_embed."
            )
        return cls(bounds=(0, *cuts, vocab_size), widths=widths, d_proj=d_proj)

    @property
    def vocab_size(self) -> int:
        return self.bounds[-1]

    @property
    def n_clusters(self) -> int:
        """Number of clusters, the head (cluster 0) included."""
        return len(self.widths)

    @property
    def cutoffs(self) -> tuple[int, ...]:
        return self.bounds[1:-1]

    def span(self, i: int) -> tuple[int, int]:
        """(first id, one past the last id) of cluster i."""
        return self.bounds[i], self.bounds[i + 1]

    def size(self, i: int) -> int:
        """Number of words in cluster i."""
        return self.bounds[i + 1] - self.bounds[i]

    def make_tables(self, init_std: float) -> nn.ModuleList:
        """One ``nn.Embedding(size_i, width_i)`` per cluster, weights N(0, init_std^2)."""
        tables = nn.ModuleList(nn.Embedding(self.size(i), w) for i, w in enumerate(self.widths))
        for table in tables:
            nn.init.normal_(table.weight, std=init_std)
        return tables

    def make_projections(self, init_std: float) -> nn.ModuleList:
        """Per cluster, ``nn.Linear(width_i, d_proj, bias=False)`` (weights N(0, init_std^2)), or ``nn.Identity``
        when ``width_i == d_proj``."""
        projections = nn.ModuleList()
        for w in self.widths:
            if w == self.d_proj:
                projections.append(nn.Identity())
            else:
                linear = nn.Linear(w, self.d_proj, bias=False)
                nn.init.normal_(linear.weight, std=init_std)
                projections.append(linear)
        return projections


def _project_down(projection: nn.Module, hidden: Tensor) -> Tensor:
    """(..., d_proj) -> (..., width): the transpose of the projection the embedding applies (``P^T h``)."""
    if isinstance(projection, nn.Identity):
        return hidden
    return hidden @ projection.weight


def _check_ids(ids: Tensor, vocab_size: int, what: str) -> None:
    """ValueError unless ``ids`` is an integer tensor with every entry in [0, vocab_size) (one host sync)."""
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{what} must be an integer tensor of token ids, got dtype {ids.dtype}.")
    if ids.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(ids))
    if lo < 0 or hi >= vocab_size:
        bad = ids[(ids < 0) | (ids >= vocab_size)].unique()
        shown = bad[:5].tolist() + (["..."] if bad.numel() > 5 else [])
        raise ValueError(
            f"{what} must be token ids in [0, {vocab_size}), but contain {shown}: check that the model's vocab_size "
            "matches the vocabulary the data was tokenized with."
        )


def _check_hidden(hidden: Tensor, width: int, targets: Tensor | None = None) -> None:
    """ValueError unless hidden is (..., width) and, given targets, hidden.shape[:-1] == targets.shape."""
    if hidden.dim() < 1 or hidden.shape[-1] != width:
        raise ValueError(f"hidden must have shape (..., {width}), got {tuple(hidden.shape)}.")
    if targets is not None and hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"hidden (..., {width}) and targets (...) must have the same leading shape, got hidden "
            f"{tuple(hidden.shape)} and targets {tuple(targets.shape)}."
        )


# --------------------------------------------------------------------------------------------------------------------
# Adaptive input and adaptive softmax


class _ClusteredVocabulary(nn.Module):
    """What the adaptive embedding and softmax share: the cluster layout and the sizes it was built from (checked by
    :meth:`ClusterLayout.build`)."""

    def __init__(self, vocab_size: int, d_embed: int, d_proj: int, cutoffs: Sequence[int], div_val: int) -> None:
        super().__init__()
        self.layout = ClusterLayout.build(vocab_size, d_embed, d_proj, cutoffs, div_val)
        self.vocab_size, self.d_embed, self.d_proj, self.div_val = vocab_size, d_embed, d_proj, div_val
        self.cutoffs = self.layout.cutoffs

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, cutoffs={self.cutoffs}, widths={self.layout.widths}, d_proj={self.d_proj}"
        )


class AdaptiveEmbedding(_ClusteredVocabulary):
    """Adaptive input embedding: token ids (...) -> vectors (..., d_proj).

    Token t in cluster i (``bounds[i] <= t < bounds[i + 1]``) is embedded as
    ``projections[i](tables[i].weight[t - bounds[i]])``, times ``sqrt(d_proj)`` when ``scale``.

    Args:
        vocab_size: number of token ids V (ids sorted by decreasing frequency, so that cluster 0 holds the frequent
            words).
        d_embed: width of cluster 0's table; cluster i's is ``d_embed // div_val**i``.
        d_proj: output width (the body's input width).
        cutoffs: first id of each tail cluster, strictly increasing, in (0, V); empty: one cluster, i.e. a plain
            ``nn.Embedding(V, d_embed)`` followed by a projection to d_proj when d_embed != d_proj.
        div_val: width divisor from one cluster to the next.
        scale: multiply the output by ``sqrt(d_proj)`` (Transformer-XL, the DEQ paper).
        init_std, proj_init_std: standard deviations of the normal initialization of the tables and projections
            (Transformer-XL's defaults).

    Attributes:
        tables: ``ModuleList`` of ``nn.Embedding(size_i, width_i)``, one per cluster.
        projections: ``ModuleList`` of ``nn.Linear(width_i, d_proj, bias=False)``, or ``nn.Identity`` where
            ``width_i == d_proj``.
        layout: the :class:`ClusterLayout`.

    Raises:
        ValueError: bad cutoffs (see :meth:`ClusterLayout.build`), or token ids outside [0, V) in forward.
    """

    def __init__(
        self,
        vocab_size: int,
        d_embed: int,
        d_proj: int,
        cutoffs: Sequence[int],
        div_val: int = 1,
        scale: bool = True,
        *,
        init_std: float = 0.02,
        proj_init_std: float = 0.01,
    ) -> None:
        super().__init__(vocab_size, d_embed, d_proj, cutoffs, div_val)
        self.scale = math.sqrt(d_proj) if scale else 1.0
        self.tables = self.layout.make_tables(init_std)
        self.projections = self.layout.make_projections(proj_init_std)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (...) integer ids -> (..., d_proj)."""
        _check_ids(tokens, self.vocab_size, "tokens")
        if self.layout.n_clusters == 1:
            return self.projections[0](self.tables[0](tokens)) * self.scale
        flat = tokens.reshape(-1)
        out = self.tables[0].weight.new_zeros(flat.shape[0], self.d_proj)
        for i in range(self.layout.n_clusters):
            lo, hi = self.layout.span(i)
            rows = ((flat >= lo) & (flat < hi)).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            vectors = self.projections[i](self.tables[i](flat[rows] - lo))
            out = out.index_copy(0, rows, vectors.to(out.dtype))
        return out.view(*tokens.shape, self.d_proj) * self.scale


class AdaptiveLogSoftmax(_ClusteredVocabulary):
    """Adaptive softmax over the clusters of an :class:`AdaptiveEmbedding`.

    The head is a softmax over cluster 0's words and one token per tail cluster; tail cluster i is a softmax over its
    own words. ``log p(w) = head[w]`` for w in cluster 0, ``head[c1 + i - 1] + tail_i[w - bounds[i]]`` for w in
    cluster i. Cluster i maps the hidden state h (d_proj) down to its width (``P_i^T h``) and takes logits against its
    word table plus its bias (the head: against cluster 0's table and the cluster-token weights).

    Args:
        vocab_size, d_embed, d_proj, cutoffs, div_val: as for :class:`AdaptiveEmbedding`; d_proj is the width of the
            hidden states.
        tie_with: an AdaptiveEmbedding with the same clusters, widths and d_proj: the word tables and projections
            are then its Parameters (the same objects, trained by both uses); the biases and cluster-token weights
            stay this module's own.
        init_std, proj_init_std: normal initialization of the parameters this module creates (biases start at 0).

    Attributes:
        tables, projections: as for :class:`AdaptiveEmbedding` (the embedding's own ModuleLists when tied).
        biases: ``ParameterList`` of per-cluster word biases, (size_i,).
        cluster_weight: (k, d_embed) weights of the k tail-cluster tokens (None when there are no cutoffs).
        cluster_bias: (k,) their biases (None when there are no cutoffs).
        tied: whether the tables and projections are an embedding's.

    Raises:
        ValueError: bad cutoffs, a ``tie_with`` of different shape, or targets outside [0, V) in :meth:`nll`.
    """

    def __init__(
        self,
        vocab_size: int,
        d_embed: int,
        d_proj: int,
        cutoffs: Sequence[int],
        div_val: int = 1,
        tie_with: AdaptiveEmbedding | None = None,
        *,
        init_std: float = 0.02,
        proj_init_std: float = 0.01,
    ) -> None:
        super().__init__(vocab_size, d_embed, d_proj, cutoffs, div_val)
        self.tied = tie_with is not None
        if tie_with is None:
            self.tables = self.layout.make_tables(init_std)
            self.projections = self.layout.make_projections(proj_init_std)
        else:
            if not isinstance(tie_with, AdaptiveEmbedding):
                raise ValueError(f"tie_with must be an AdaptiveEmbedding (or None), got {type(tie_with).__name__}.")
            if tie_with.layout != self.layout:
                raise ValueError(
                    f"tie_with has clusters {tie_with.layout.bounds} of widths {tie_with.layout.widths} projected to "
                    f"{tie_with.d_proj}, but this softmax has {self.layout.bounds}, {self.layout.widths} and "
                    f"{d_proj}: build both with the same vocab_size, d_embed, d_proj, cutoffs and div_val."
                )
            self.tables = tie_with.tables
            self.projections = tie_with.projections
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(self.layout.size(i))) for i in range(len(self.tables)))
        n_tail = self.layout.n_clusters - 1
        if n_tail > 0:
            self.cluster_weight = nn.Parameter(torch.empty(n_tail, self.layout.widths[0]).normal_(std=init_std))
            self.cluster_bias = nn.Parameter(torch.zeros(n_tail))
        else:
            self.register_parameter("cluster_weight", None)
            self.register_parameter("cluster_bias", None)

    def head_log_probs(self, hidden: Tensor) -> Tensor:
        """hidden (N, d_proj) -> (N, c1 + k): log-probabilities of cluster 0's words, then of the k tail clusters."""
        weight, bias = self.tables[0].weight, self.biases[0]
        if self.cluster_weight is not None:
            weight = torch.cat([weight, self.cluster_weight])
            bias = torch.cat([bias, self.cluster_bias])
        return F.log_softmax(F.linear(_project_down(self.projections[0], hidden), weight, bias), dim=-1)

    def tail_log_probs(self, i: int, hidden: Tensor) -> Tensor:
        """hidden (n, d_proj) -> (n, size_i): log-probabilities of cluster i's words given cluster i (i >= 1)."""
        logits = F.linear(_project_down(self.projections[i], hidden), self.tables[i].weight, self.biases[i])
        return F.log_softmax(logits, dim=-1)

    def log_probs(self, hidden: Tensor) -> Tensor:
        """hidden (..., d_proj) -> (..., V) log-probabilities over the whole vocabulary (forms the (N, V) matrix)."""
        _check_hidden(hidden, self.d_proj)
        flat = hidden.reshape(-1, self.d_proj)
        head = self.head_log_probs(flat)
        c1 = self.layout.bounds[1]
        pieces = [head[:, :c1]]
        for i in range(1, self.layout.n_clusters):
            pieces.append(head[:, c1 + i - 1 : c1 + i] + self.tail_log_probs(i, flat))
        return torch.cat(pieces, dim=-1).view(*hidden.shape[:-1], self.vocab_size)

    def nll(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Negative log-likelihood in nats: hidden (..., d_proj), targets (...) integer ids -> (...).

        Computes the head for every row, and tail cluster i only for the rows whose target is in cluster i: no
        (N, V) matrix is formed. Equal to ``-log_probs(hidden).gather(-1, targets[..., None])[..., 0]``.

        Raises:
            ValueError: a target outside [0, V), or hidden.shape[:-1] != targets.shape.
        """
        _check_hidden(hidden, self.d_proj, targets)
        _check_ids(targets, self.vocab_size, "targets")
        flat_h = hidden.reshape(-1, self.d_proj)
        flat_t = targets.reshape(-1).long()
        head = self.head_log_probs(flat_h)
        c1 = self.layout.bounds[1]
        if self.layout.n_clusters == 1:
            return -head.gather(1, flat_t[:, None]).squeeze(1).view(targets.shape)
        cutoffs = torch.tensor(self.cutoffs, dtype=flat_t.dtype, device=flat_t.device)
        cluster = torch.bucketize(flat_t, cutoffs, right=True)  # 0 for t < c1, i for c_i <= t < c_{i+1}
        head_column = torch.where(cluster == 0, flat_t, c1 + cluster - 1)
        log_p = head.gather(1, head_column[:, None]).squeeze(1)
        for i in range(1, self.layout.n_clusters):
            rows = (cluster == i).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            tail = self.tail_log_probs(i, flat_h[rows])
            within = (flat_t[rows] - self.layout.bounds[i])[:, None]
            log_p = log_p.index_add(0, rows, tail.gather(1, within).squeeze(1).to(log_p.dtype))
        return -log_p.view(targets.shape)

    def forward(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Same as :meth:`nll`."""
        return self.nll(hidden, targets)

    def predict(self, hidden: Tensor, targets: Tensor | None = None) -> tuple[Tensor | None, Tensor | None]:
        """(None, NLL or None): the adaptive softmax never forms the (N, V) logits."""
        return None, None if targets is None else self.nll(hidden, targets)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tied={self.tied}"


# --------------------------------------------------------------------------------------------------------------------
# Plain softmax


class LinearHead(nn.Module):
    """Full softmax: ``logits = proj(h) @ weight^T + bias``.

    Untied, ``weight`` (V, d_hidden) and ``bias`` (V,) are those of an ``nn.Linear(d_hidden, V)`` (same
    initialization, same state-dict keys) and ``proj`` is the identity. Tied, ``weight`` is the embedding's
    Parameter (V, d_embed), ``bias`` starts at zero and ``proj`` is ``nn.Linear(d_hidden, d_embed, bias=False)``
    when d_hidden != d_embed (the identity otherwise).

    Args:
        d_hidden: width of the hidden states.
        vocab_size: V.
        tie_with: an ``nn.Embedding(V, d_embed)`` whose weight to share, or None.

    Raises:
        ValueError: a ``tie_with`` of another vocabulary size, hidden states of the wrong width, or targets outside
            [0, V) in :meth:`nll`.
    """

    def __init__(self, d_hidden: int, vocab_size: int, tie_with: nn.Embedding | None = None) -> None:
        super().__init__()
        if d_hidden < 1 or vocab_size < 1:
            raise ValueError(f"d_hidden and vocab_size must be positive, got {d_hidden} and {vocab_size}.")
        self.d_hidden, self.vocab_size = d_hidden, vocab_size
        self.tied = tie_with is not None
        if tie_with is None:
            linear = nn.Linear(d_hidden, vocab_size)
            self.proj: nn.Module = nn.Identity()
            self.weight, self.bias = linear.weight, linear.bias
            return
        if not isinstance(tie_with, nn.Embedding):
            raise ValueError(f"tie_with must be an nn.Embedding (or None), got {type(tie_with).__name__}.")
        if tie_with.num_embeddings != vocab_size:
            raise ValueError(
                f"tie_with embeds {tie_with.num_embeddings} tokens but the head predicts vocab_size={vocab_size}: "
                "build both with the same vocabulary size."
            )
        d_embed = tie_with.embedding_dim
        self.proj = nn.Identity() if d_embed == d_hidden else nn.Linear(d_hidden, d_embed, bias=False)
        self.weight = tie_with.weight
        self.bias = nn.Parameter(torch.zeros(vocab_size, dtype=tie_with.weight.dtype))

    def logits(self, hidden: Tensor) -> Tensor:
        """hidden (..., d_hidden) -> logits (..., V)."""
        _check_hidden(hidden, self.d_hidden)
        return F.linear(self.proj(hidden), self.weight, self.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        """Same as :meth:`logits` (a drop-in for an ``nn.Linear`` head)."""
        return self.logits(hidden)

    def log_probs(self, hidden: Tensor) -> Tensor:
        """hidden (..., d_hidden) -> log-probabilities (..., V)."""
        return F.log_softmax(self.logits(hidden), dim=-1)

    def nll(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Negative log-likelihood in nats (cross-entropy of the logits): hidden (..., d_hidden), targets (...) ->
        (...).

        Raises:
            ValueError: a target outside [0, V), or hidden.shape[:-1] != targets.shape.
        """
        _, nll = self.predict(hidden, targets)
        assert nll is not None
        return nll

    def predict(self, hidden: Tensor, targets: Tensor | None = None) -> tuple[Tensor | None, Tensor | None]:
        """(logits (..., V), NLL (...) from those same logits when ``targets`` are given, else None). The
        cross-entropy is taken in at least float32 (the logits may be half precision under mixed precision).

        Raises:
            ValueError: a target outside [0, V), or hidden.shape[:-1] != targets.shape.
        """
        logits = self.logits(hidden)
        if targets is None:
            return logits, None
        _check_hidden(hidden, self.d_hidden, targets)
        _check_ids(targets, self.vocab_size, "targets")
        scores = logits.reshape(-1, self.vocab_size)
        if scores.dtype in (torch.float16, torch.bfloat16):
            scores = scores.float()
        nll = F.cross_entropy(scores, targets.reshape(-1).long(), reduction="none").view(targets.shape)
        return logits, nll

    def extra_repr(self) -> str:
        return f"d_hidden={self.d_hidden}, vocab_size={self.vocab_size}, tied={self.tied}"


class ScaledEmbedding(nn.Embedding):
    """An embedding table meant to be shared with the softmax: rows start at N(0, 1 / d_embed), so that as softmax
    weights they give logits of unit scale, and the looked-up vectors are multiplied by sqrt(d_embed), so that the
    model's input is of unit scale too (the Transformer convention). tokens (...) -> (..., d_embed)."""

    def __init__(self, vocab_size: int, d_embed: int) -> None:
        super().__init__(vocab_size, d_embed)
        nn.init.normal_(self.weight, std=d_embed**-0.5)
        self.scale = d_embed**0.5

    def forward(self, tokens: Tensor) -> Tensor:
        return super().forward(tokens) * self.scale


# --------------------------------------------------------------------------------------------------------------------
# Builder


HEAD_KINDS = ("linear", "adaptive")


def build_embedding_and_head(
    kind: str,
    vocab_size: int,
    d_embed: int,
    d_hidden: int,
    cutoffs: Sequence[int] = (),
    div_val: int = 1,
    tie: bool = True,
) -> tuple[nn.Module, OutputHead]:
    """The input embedding and the softmax of a language model.

    - ``"linear"``: ``nn.Embedding(V, d_embed)`` and ``LinearHead(d_hidden, V)``; when ``tie``, a
      ``ScaledEmbedding`` shared with the head (with a projection d_hidden -> d_embed in the head when the widths
      differ). ``cutoffs`` and ``div_val`` are ignored.
    - ``"adaptive"``: ``AdaptiveEmbedding(V, d_embed, d_proj=d_hidden, cutoffs, div_val)`` and
      ``AdaptiveLogSoftmax`` over the same clusters, whose tables and projections are the embedding's when ``tie``.

    The embedding's output width, i.e. the width the body takes as input, is ``embedding_width(embedding)``:
    ``d_embed`` for "linear", but ``d_hidden`` for "adaptive" (the adaptive input projects every cluster to d_proj,
    which is d_hidden here). The head takes hidden states of width ``d_hidden`` in both cases.

    Raises:
        ValueError: an unknown kind, or bad sizes / cutoffs.
    """
    if kind == "linear":
        embedding = ScaledEmbedding(vocab_size, d_embed) if tie else nn.Embedding(vocab_size, d_embed)
        return embedding, LinearHead(d_hidden, vocab_size, tie_with=embedding if tie else None)
    if kind == "adaptive":
        adaptive = AdaptiveEmbedding(vocab_size, d_embed, d_hidden, cutoffs, div_val)
        head = AdaptiveLogSoftmax(vocab_size, d_embed, d_hidden, cutoffs, div_val, tie_with=adaptive if tie else None)
        return adaptive, head
    raise ValueError(f"kind must be one of {HEAD_KINDS}, got {kind!r}.")


def embedding_width(embedding: nn.Module) -> int:
    """Width of the vectors ``embedding`` outputs, i.e. the body's input width: ``embedding_dim`` of an
    ``nn.Embedding``, ``d_proj`` of an :class:`AdaptiveEmbedding`.

    Raises:
        TypeError: another kind of module.
    """
    if isinstance(embedding, AdaptiveEmbedding):
        return embedding.d_proj
    if isinstance(embedding, nn.Embedding):
        return embedding.embedding_dim
    raise TypeError(f"expected an nn.Embedding or an AdaptiveEmbedding, got {type(embedding).__name__}.")
