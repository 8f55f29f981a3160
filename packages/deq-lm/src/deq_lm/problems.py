"""Problems: what a model learns and how it is scored, as the training loop and the evaluation need it (batches per
step, evaluation, loss, metric). deq-lm's skeleton task (:class:`deq_lm.train.SequenceTask`) trains on one of them.

- ``CopyMemoryProblem``: fresh random sequences every step, fixed valid/test sets, accuracy over the last ten positions.
- ``LanguageModelProblem``: a word-level corpus read in order (the Transformer-XL / DEQ protocol): the training stream
  is cut into ``batch_size`` columns, step s trains on segment s mod (number of segments), and the model's state
  (memory, TrellisNet history) is carried from one segment to the next; evaluation reads a whole split the same way.

Both have the same methods, so ``train.py`` and ``evaluate.py`` never look at the problem's kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from .configs.config import Config, DataConfig
from .data import (
    UNK,
    Corpus,
    CorpusError,
    CorpusSource,
    HFSource,
    OrderedLMBatches,
    TextDirSource,
    WordVocab,
    corpus_source,
    load_corpus,
    perplexity,
)
from .data.copy_memory import N_SYMBOLS, copy_memory_batch, copy_memory_metrics, copy_memory_split, step_generator
from .data.pydoc_corpus import write_pydoc_corpus
from .data.pythondocs_corpus import write_pythondocs_corpus
from .data.sources import SPLITS
from .models import ModelOutput, SequenceModel

SPLIT_SEEDS = {"valid": 1, "test": 2}
# A split with more <unk> than this (fraction of its tokens) gets a warning at startup: its perplexity is mostly
# that of predicting <unk>, not comparable with another split's (word-level PTB has about 5 %).
UNK_WARNING_RATE = 0.10


class Problem(Protocol):
    """What the training loop and the evaluation use."""

    metric: str  # name of the problem's metric in metrics.jsonl ("acc", "ppl")
    stateful: bool  # the model's state is carried from one step's batch to the next

    @property
    def vocab_size(self) -> int: ...

    @property
    def seq_len(self) -> int: ...

    def train_batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> tuple[Tensor, Tensor]: ...

    def starts_stream(self, step: int, batch_size: int) -> bool: ...

    def loss_and_metric(self, out: ModelOutput, targets: Tensor) -> tuple[Tensor, Tensor]: ...

    def evaluate(self, model: SequenceModel, split: str, device: torch.device) -> dict[str, float]: ...

    def describe(self) -> str: ...

    def data_warnings(self) -> list[str]: ...

    def baseline(self) -> str: ...


def _rows(tensors: tuple[Tensor, Tensor], batch_size: int, rank: int, world: int) -> tuple[Tensor, Tensor]:
    """This process's contiguous slice (batch_size // world rows) of a global batch."""
    if batch_size % world:
        raise ValueError(f"batch_size ({batch_size}) must be divisible by the number of processes ({world}).")
    rows = batch_size // world
    return tensors[0][rank * rows : (rank + 1) * rows], tensors[1][rank * rows : (rank + 1) * rows]


class _Totals:
    """Sums of per-batch statistics over an evaluation, weighted by a count."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.count = 0.0

    def add(self, weight: float, info: Any = None, **values: float) -> None:
        if info is not None:
            values.update(info.statistics())
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.count += weight

    def means(self) -> dict[str, float]:
        return {key: value / self.count for key, value in self.sums.items()}


@dataclass(frozen=True)
class CopyMemoryProblem:
    """Copy memory with horizon ``T``: fresh training batches every step, fixed valid/test sets.

    The global batch of a step depends only on (seed, step), so a resumed run and a run split over processes see
    the same sequences; each process takes its contiguous slice.
    """

    T: int
    seed: int
    n_valid: int
    n_test: int

    metric: str = "acc"  # accuracy over the last ten positions
    stateful: bool = False  # sequences are independent: no memory carried across steps

    @classmethod
    def from_config(cls, cfg: Config) -> CopyMemoryProblem:
        return cls(T=cfg.data.T, seed=cfg.run.seed, n_valid=cfg.data.n_valid, n_test=cfg.data.n_test)

    @property
    def vocab_size(self) -> int:
        return N_SYMBOLS

    @property
    def seq_len(self) -> int:
        return self.T + 20

    def train_batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> tuple[Tensor, Tensor]:
        """This process's slice (batch_size // world rows) of the global batch of ``step``: (inputs, targets),
        LongTensors (rows, T + 20)."""
        return _rows(copy_memory_batch(batch_size, self.T, step_generator(self.seed, step)), batch_size, rank, world)

    def starts_stream(self, step: int, batch_size: int) -> bool:
        return True

    def describe(self) -> str:
        """The problem and its data, for the first line of a run."""
        return f"copy memory (T={self.T})"

    def data_warnings(self) -> list[str]:
        return []  # generated data

    def baseline(self) -> str:
        """Chance level of the metric: a uniform guess among the 8 symbols to recall."""
        return "acc 0.125 (uniform guess among 8 symbols)"

    def eval_set(self, split: str) -> tuple[Tensor, Tensor]:
        """The fixed ``split`` ("valid" or "test") set: (inputs, targets), (n, T + 20)."""
        if split not in SPLIT_SEEDS:
            raise ValueError(f"unknown split {split!r}; choose one of {list(SPLIT_SEEDS)}.")
        n = self.n_valid if split == "valid" else self.n_test
        return copy_memory_split(n, self.T, seed=10_000 * SPLIT_SEEDS[split] + self.seed)

    def loss_and_metric(self, out: ModelOutput, targets: Tensor) -> tuple[Tensor, Tensor]:
        """(mean cross-entropy over all positions, accuracy over the last ten) as scalar tensors."""
        assert out.logits is not None, "copy memory needs a linear head (logits)"
        return copy_memory_metrics(out.logits, targets)

    @torch.no_grad()
    def evaluate(
        self, model: SequenceModel, split: str, device: torch.device, batch_size: int = 256
    ) -> dict[str, float]:
        """Loss, accuracy and, for DEQs, mean forward NFE and residual on the whole ``split`` (the model's mode is
        left to the caller)."""
        inputs, targets = self.eval_set(split)
        totals = _Totals()
        for start in range(0, inputs.shape[0], batch_size):
            x = inputs[start : start + batch_size].to(device)
            y = targets[start : start + batch_size].to(device)
            out = model(x)
            loss, metric = self.loss_and_metric(out, y)
            totals.add(x.shape[0], out.info, loss=float(loss), acc=float(metric))
        return totals.means()


@dataclass(frozen=True)
class LanguageModelProblem:
    """Word-level language modeling on an encoded corpus, read in order.

    Training: the training stream is cut into ``batch_size`` columns (``OrderedLMBatches`` with segments of
    ``tgt_len`` and only full segments); step s trains on segment s mod n, and a new pass over the stream starts the
    model's state afresh. Each process takes its contiguous rows of the columns, so the union over processes is the
    single-process batch. Evaluation: the split in ``eval_batch_size`` columns, segments of ``eval_tgt_len``, state
    carried across segments; perplexity = exp(mean NLL over every predicted token).
    """

    corpus: Corpus
    tgt_len: int
    eval_tgt_len: int
    eval_batch_size: int
    source: str = "a corpus"  # where the text was read from, for messages

    metric: str = "ppl"
    stateful: bool = True
    _train_streams: dict[int, OrderedLMBatches] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_config(cls, cfg: Config, offline: bool = False) -> LanguageModelProblem:
        """Find the corpus (``cfg.data.data_dir`` in any form :func:`~deq_lm.data.corpus_source` reads,
        ``cfg.data.dataset`` or the corpus' Hugging Face dataset, downloaded unless ``offline`` or the environment asks
        for the local cache only, or for ``corpus=pydoc`` Python's documentation written to the cache directory),
        tokenize it or read the cached encoding."""
        data = cfg.data
        data_dir = Path(data.data_dir).expanduser() if data.data_dir else None
        if data.cache_dir:
            cache_dir = Path(data.cache_dir).expanduser()
        elif data_dir is not None:
            cache_dir = data_dir / ".deq_lm_cache"
        else:
            cache_dir = Path("~/.cache/deq_lm").expanduser()
        own_text = data_dir is None and not data.dataset
        if own_text and data.corpus == "pydoc":  # rewritten each time (~0.1 s): never a stale text
            data_dir = write_pydoc_corpus(cache_dir / "pydoc-text")
        if own_text and data.corpus == "pythondocs":  # from the installed python3.11-doc package
            data_dir = write_pythondocs_corpus(cache_dir / "pythondocs-text")
        source = corpus_source(
            data.corpus, data_dir, offline=offline, dataset=data.dataset, dataset_config=data.dataset_config,
            text_column=data.text_column, splits=data.splits,
        )  # fmt: skip
        vocab_size = data.vocab_size or None
        corpus = load_corpus(source, cache_dir, data.tokenizer, vocab_size=vocab_size, min_freq=data.min_freq)
        eval_tgt_len = data.eval_tgt_len or data.tgt_len
        problem = cls(corpus, data.tgt_len, eval_tgt_len, data.eval_batch_size, _where(source, data))
        problem.check_sizes(cfg.optim.batch_size)
        return problem

    def check_sizes(self, batch_size: int) -> None:
        """Check that every split holds at least one batch: training ``batch_size`` columns of ``tgt_len`` targets,
        evaluation ``eval_batch_size`` columns of one target or more.

        Raises:
            CorpusError: naming the split, its size and the settings to lower.
        """
        self.train_stream(batch_size)
        for split in ("valid", "test"):
            n, columns = self.corpus.split(split).numel(), self.eval_batch_size
            if n - 1 < columns:
                lower = f"lower eval_batch_size to {n - 1} or less, or add text" if n > 1 else "add text"
                raise CorpusError(
                    f"the {split} split of {self.source} has {n} tokens, too few for eval_batch_size={columns} "
                    f"columns (it needs at least {columns + 1}): {lower}."
                )

    def describe(self) -> str:
        """The problem and the data actually loaded (source, vocabulary, tokens and <unk> share per split), for the
        first line of a run."""
        kind = "word" if isinstance(self.corpus.tokenizer, WordVocab) else "sentencepiece"
        tokens = " / ".join(f"{s} {self.corpus.split(s).numel():,}" for s in SPLITS)
        unk = " / ".join(f"{s} {100 * self.corpus.unk_rate(s):.2f}%" for s in SPLITS)
        return (
            f"language modeling on {self.source}, {kind} vocabulary of {self.vocab_size}, tokens {tokens}, {UNK} {unk}"
        )

    def data_warnings(self) -> list[str]:
        """One line per split whose share of <unk> tokens is above UNK_WARNING_RATE."""
        found = []
        for split in SPLITS:
            rate = self.corpus.unk_rate(split)
            if rate > UNK_WARNING_RATE:
                found.append(
                    f"{100 * rate:.1f}% of the {split} split's tokens are {UNK} (not in the training vocabulary): its "
                    f"loss and perplexity mostly measure predicting {UNK} and are not comparable with other splits; "
                    "check that the split is the same kind of text as train.txt, or lower min_freq / raise vocab_size."
                )
        return found

    def baseline(self) -> str:
        """Chance level of the metric: the validation perplexity of the training text's unigram frequencies (add-one
        smoothed), i.e. of a model that ignores the context."""
        vocab = self.corpus.vocab_size
        counts = torch.bincount(self.corpus.split("train").flatten(), minlength=vocab).double() + 1.0
        nll = -(counts / counts.sum()).log()[self.corpus.split("valid").flatten()].mean()
        return f"ppl {math.exp(float(nll)):.4g} (unigram frequencies of the training text)"

    @property
    def vocab_size(self) -> int:
        return self.corpus.vocab_size

    @property
    def seq_len(self) -> int:
        return self.tgt_len

    def train_stream(self, batch_size: int) -> OrderedLMBatches:
        """The training segments for a global batch of ``batch_size`` columns."""
        if batch_size not in self._train_streams:
            try:
                stream = OrderedLMBatches.from_ids(self.corpus.train, batch_size, self.tgt_len, drop_last=True)
            except ValueError:
                raise CorpusError(
                    f"the train split of {self.source} has {self.corpus.train.numel()} tokens, too few for one "
                    f"batch of batch_size={batch_size} columns x tgt_len={self.tgt_len} (it needs at least "
                    f"{batch_size * self.tgt_len + 1}): lower batch_size or tgt_len, or add text."
                ) from None
            self._train_streams[batch_size] = stream
        return self._train_streams[batch_size]

    def segments_per_epoch(self, batch_size: int) -> int:
        return len(self.train_stream(batch_size))

    def train_batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> tuple[Tensor, Tensor]:
        """This process's rows of training segment ``step mod n``: (inputs, targets), (batch_size // world, tgt_len)."""
        stream = self.train_stream(batch_size)
        return _rows(stream[step % len(stream)], batch_size, rank, world)

    def starts_stream(self, step: int, batch_size: int) -> bool:
        """Whether ``step`` reads the first segment of a pass over the training stream (no state to carry)."""
        return step % self.segments_per_epoch(batch_size) == 0

    def loss_and_metric(self, out: ModelOutput, targets: Tensor) -> tuple[Tensor, Tensor]:
        """(mean token NLL in nats, perplexity of these tokens) as scalar tensors."""
        assert out.nll is not None, "call the model with targets= to get the NLL"
        loss = out.nll.mean()
        return loss, torch.exp(loss.detach().clamp(max=700.0))

    @torch.no_grad()
    def evaluate(self, model: SequenceModel, split: str, device: torch.device) -> dict[str, float]:
        """Loss (mean token NLL), perplexity, the split's share of <unk> tokens (``unk_rate``) and, for DEQs, mean
        forward NFE / residual per segment over the whole ``split`` ("valid" or "test"), carrying the model's state
        across segments (the model's mode is left to the caller)."""
        segments = OrderedLMBatches.from_ids(self.corpus.split(split), self.eval_batch_size, self.eval_tgt_len)
        nll_sum, n_tokens, state = 0.0, 0, None
        solver = _Totals()
        for inputs, targets in segments:
            out = model(inputs.to(device), state, targets=targets.to(device))
            assert out.nll is not None
            nll_sum += float(out.nll.double().sum())
            n_tokens += targets.numel()
            state = out.state
            if out.info is not None:
                solver.add(1.0, out.info)
        loss = nll_sum / n_tokens
        result = {"loss": loss, "ppl": perplexity(nll_sum, n_tokens), "unk_rate": self.corpus.unk_rate(split)}
        return {**result, **(solver.means() if solver.count else {})}


def _where(source: CorpusSource, data: DataConfig) -> str:
    """What the text of ``source`` is, for messages: the directory, the dataset's column, or the Hugging Face
    corpus."""
    lowered = f", lowercased as corpus={data.corpus} asks" if source.lower else ""
    if isinstance(source, TextDirSource):
        return f"{'pydoc ' if data.corpus == 'pydoc' and not data.data_dir else ''}text in {source.path}{lowered}"
    if isinstance(source, HFSource) and source.origin:
        return f"column {source.text_column!r} of {source.origin}{lowered}"
    return f"{source.label} from the Hugging Face cache"


def build_problem(cfg: Config, offline: bool = False) -> CopyMemoryProblem | LanguageModelProblem:
    """The problem named by ``cfg.data.task``; ``offline``: a Hugging Face corpus from the local cache only."""
    if cfg.data.task == "copy_memory":
        return CopyMemoryProblem.from_config(cfg)
    if cfg.data.task == "lm":
        return LanguageModelProblem.from_config(cfg, offline=offline)
    raise ValueError(f"unknown task {cfg.data.task!r}")  # unreachable: DataConfig checks the name


__all__ = ["CopyMemoryProblem", "LanguageModelProblem", "Problem", "build_problem"]
