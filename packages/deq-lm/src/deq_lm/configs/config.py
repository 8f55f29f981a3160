"""One frozen dataclass of sections holds every setting of a run: ``data`` (task, corpus, tokenizer, segments),
``model`` (which network and its sizes), ``deq`` (DEQ solvers and DEQ training features), ``optim`` (Adam and its
schedule), ``run`` (seed, precision, logging and checkpoint periods).

A setting's name is its dotted path: ``optim.lr=3e-4`` on the command line
(``deq_core.train.overrides.apply_overrides``), ``cfg.optim.lr`` in Python. No name is in two sections, so the short
name works too (``lr=3e-4``), and ``model=gru`` sets ``model.name``. Each section checks its own values when built,
with messages that name the dotted key (``data.T must be ...``); :class:`Config` checks what spans sections.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Literal

from deq_core.train.checks import check_at_least, check_choice, check_finite, check_fraction, in_section
from deq_core.train.deq_config import DEQConfig, deq_section
from deq_core.train.sections import OptimConfig, RunConfig, section

ModelName = Literal[
    "deq_transformer", "deq_trellisnet", "transformer_xl", "transformer_tied", "trellisnet", "lstm", "gru", "tcn"
]
MODELS: tuple[str, ...] = typing.get_args(ModelName)
DEQ_MODELS = ("deq_transformer", "deq_trellisnet")
TRANSFORMERS = ("deq_transformer", "transformer_xl", "transformer_tied")
TaskName = Literal["copy_memory", "lm"]
HeadName = Literal["linear", "adaptive"]
AttentionForm = Literal["gathered", "fused"]


@dataclass(frozen=True)
class DataConfig:
    """The ``data`` section: the task and its data.

    task: "copy_memory" or "lm" (word-level language modeling).
    Copy memory: T: the horizon (sequences have T + 20 positions); n_valid, n_test: sizes of the fixed evaluation sets.
    Language modeling: corpus: "ptb", "wikitext-103", "wikitext-103-raw" (from Hugging Face, downloaded and cached,
    unless data_dir or dataset is set), "pydoc" / "pythondocs" (written offline from Python's documentation), or any
    name for the text of data_dir or dataset (PTB is lowercased). data_dir: a folder with train.txt, valid.txt,
    test.txt, or with the three splits in another form ``datasets`` reads (a ``save_to_disk`` folder; parquet, arrow,
    json, jsonl or txt files named by split) ("": the Hugging Face dataset). dataset: a Hugging Face dataset to read
    instead of the corpus' own, a Hub name (``wikitext``) or a folder ``datasets.load_dataset`` reads ("": the
    corpus'); dataset_config: its config (``wikitext-103-raw-v1``; also a data_dir README's config). text_column: the
    column of text of a dataset ("": "text", or the only column of strings). splits: the dataset's names of the
    train, valid and test splits (empty: train, validation or valid, test). cache_dir: where the tokenized splits are
    cached ("": DATA_DIR/.deq_lm_cache, or ~/.cache/deq_lm for Hugging Face corpora). tokenizer: "word" (the papers)
    or "sentencepiece". vocab_size: sentencepiece pieces (required), or word level the most frequent words kept (0:
    all). min_freq: rarer training words become <unk>. tgt_len: positions per training segment; eval_tgt_len: per
    evaluation segment (0: tgt_len); eval_batch_size: columns of the evaluation stream. Memory (model.mem_len) and
    TrellisNet history are carried from one segment to the next in training and in evaluation.
    """

    task: TaskName = "copy_memory"
    T: int = 100
    n_valid: int = 256
    n_test: int = 1000
    corpus: str = "ptb"
    data_dir: str = ""
    dataset: str = ""
    dataset_config: str = ""
    text_column: str = ""
    splits: tuple[str, ...] = ()
    cache_dir: str = ""
    tokenizer: Literal["word", "sentencepiece"] = "word"
    vocab_size: int = 0
    min_freq: int = 1
    tgt_len: int = 150
    eval_tgt_len: int = 0
    eval_batch_size: int = 10

    def __post_init__(self) -> None:
        with in_section("data"):
            _check_data(self)


@dataclass(frozen=True)
class ModelConfig:
    """The ``model`` section: the network and its sizes.

    name: one of MODELS (``model=gru`` on the command line sets it). d_embed: embedding width. d_model: transformer
    width, or hidden width of TrellisNet / LSTM / GRU / TCN. n_heads, d_head, d_ff: attention heads, head width, FFN
    width. n_layers: depth of the explicit networks (Transformer-XL layers, unrolled cell steps, RNN layers, TCN
    levels). mem_len: memory (past states) carried across segments. kernel, dilation: TrellisNet / TCN convolutions.
    pre_ln: pre-LayerNorm transformer blocks. attention: how the transformers compute their relative-position
    attention, "gathered" (Transformer-XL's) or "fused" (one fused kernel; the same function, faster for narrow
    models on long sequences, see ``deq_lm.models.attention``). weight_norm: on the cells' linear maps. dropout:
    variational dropout in the cells (ordinary dropout in the TCN). head: "linear" softmax or "adaptive" input +
    softmax (cutoffs, div_val); tie_weights: the softmax shares the input embedding (and, adaptive, its projections).
    """

    name: ModelName = "deq_transformer"
    d_embed: int = 16
    d_model: int = 16
    n_heads: int = 2
    d_head: int = 8
    d_ff: int = 32
    n_layers: int = 2
    mem_len: int = 0
    kernel: int = 2
    dilation: int = 1
    pre_ln: bool = False
    attention: AttentionForm = "gathered"
    weight_norm: bool = True
    dropout: float = 0.0
    head: HeadName = "linear"
    tie_weights: bool = False
    cutoffs: tuple[int, ...] = ()
    div_val: int = 1

    def __post_init__(self) -> None:
        with in_section("model"):
            _check_model(self)


@dataclass(frozen=True)
class LMOptimConfig(OptimConfig):
    """The ``optim`` section: deq-core's :class:`~deq_core.train.sections.OptimConfig` (batch_size, grad_accum, lr,
    weight_decay, grad_clip) and the schedule: Adam for ``steps`` optimizer steps, linear warmup over
    ``warmup_steps``, then cosine decay to lr * ``min_lr_ratio``."""

    steps: int = 1000
    warmup_steps: int = 50
    min_lr_ratio: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        with in_section("optim"):
            _check_schedule(self)


@dataclass(frozen=True)
class Config:
    """Settings of a run, in sections. Sizes are in units (widths), positions (lengths) or optimizer steps.

    data: :class:`DataConfig` (task, copy-memory horizon, corpus, tokenizer, segment lengths).
    model: :class:`ModelConfig` (``model.name``, one of MODELS, and its sizes, head and tying).
    deq: :class:`deq_core.train.deq_config.DEQConfig`: the DEQ models' solvers, limits, backward mode ("implicit",
        "phantom", "jfb"), evaluation limits, jittered training limit, unrolled pretraining and Jacobian
        regularization; it builds their layer (``deq_lm.models.build_deq``). Defaults here: Anderson both ways,
        limits 20 / 20, tol 1e-3 / 1e-4.
    optim: :class:`LMOptimConfig` (batch, accumulation, Adam's lr and weight decay, clipping, steps, warmup, cosine
        decay). Defaults here: grad_clip 1.0.
    run: :class:`deq_core.train.sections.RunConfig` (seed, mixed precision, periods of log lines, evaluations and
        checkpoints; ``run.eval_every=0``: evaluate at the last step only). Defaults here: eval_every 200.
    """

    data: DataConfig = section(DataConfig)
    model: ModelConfig = section(ModelConfig)
    deq: DEQConfig = deq_section(
        solver="anderson", max_iter=20, tol=1e-3, backward_solver="anderson", backward_max_iter=20, backward_tol=1e-4
    )
    optim: LMOptimConfig = section(LMOptimConfig, grad_clip=1.0)
    run: RunConfig = section(RunConfig, eval_every=200)

    def __post_init__(self) -> None:
        check_config(self)

    @property
    def is_deq(self) -> bool:
        """Whether the model is a DEQ (it takes the ``deq`` section's settings)."""
        return self.model.name in DEQ_MODELS

    @property
    def seq_len(self) -> int:
        """Positions per training sequence (segment)."""
        return self.data.tgt_len if self.data.task == "lm" else self.data.T + 20

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _check_data(data: DataConfig) -> None:
    check_finite(data)
    check_choice(data, "task", "tokenizer")
    check_at_least(data, 1, "T", "n_valid", "n_test", "min_freq", "tgt_len", "eval_batch_size")
    check_at_least(data, 0, "vocab_size", "eval_tgt_len")
    if not data.corpus:
        raise ValueError("corpus must be a name, e.g. ptb, wikitext-103 or the name of your --data-dir corpus.")
    if data.data_dir and data.dataset:
        raise ValueError(
            f"dataset ({data.dataset}) and data.data_dir ({data.data_dir}) both name the text: set only one of them."
        )
    if data.splits and (len(data.splits) != 3 or len(set(data.splits)) != 3 or not all(data.splits)):
        raise ValueError(
            f"splits must be three different names, of the train, valid and test splits (e.g. splits=train,dev,test), "
            f"got {data.splits}."
        )
    if data.tokenizer == "sentencepiece" and data.vocab_size < 3:
        raise ValueError(
            f"vocab_size must be >= 3 for the sentencepiece tokenizer (e.g. vocab_size=8000), got {data.vocab_size}."
        )


def _check_model(model: ModelConfig) -> None:
    check_finite(model)
    check_choice(model, "name", "head", "attention")
    check_at_least(model, 1, "d_embed", "d_model", "n_heads", "d_head", "d_ff", "n_layers", "kernel", "dilation")
    check_at_least(model, 1, "div_val")
    check_at_least(model, 0, "mem_len")
    check_fraction(model, "dropout", closed=False)
    if list(model.cutoffs) != sorted(set(model.cutoffs)) or any(c < 1 for c in model.cutoffs):
        raise ValueError(f"cutoffs must be strictly increasing positive token ids, got {model.cutoffs}.")
    if model.cutoffs and model.head != "adaptive":
        raise ValueError(f"cutoffs {model.cutoffs} need head=adaptive (the linear head has one cluster).")
    if model.name in TRANSFORMERS and model.d_model % 2:
        raise ValueError(f"d_model must be even for transformer models (sinusoidal positions), got {model.d_model}.")


def _check_schedule(optim: LMOptimConfig) -> None:
    check_at_least(optim, 1, "steps")
    check_at_least(optim, 0, "warmup_steps")
    check_fraction(optim, "min_lr_ratio")


def check_config(cfg: Config) -> None:
    """Raise ValueError for settings of different sections that do not go together (each section checks its own)."""
    if cfg.data.task == "copy_memory" and (cfg.model.head != "linear" or cfg.model.tie_weights):
        raise ValueError(
            "data.task=copy_memory uses model.head=linear without model.tie_weights (its 10 symbols need no adaptive "
            "softmax)."
        )
