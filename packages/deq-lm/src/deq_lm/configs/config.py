"""One frozen dataclass holds every setting of a run: task, model, DEQ solver, DEQ training features, optimizer.

Change a preset on the command line with ``key=value`` (``deq_core.train.overrides.apply_overrides``); every value is
checked here, in ``__post_init__``, with a message that names the key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Literal

from deq_core.train.checks import check_at_least, check_choice, check_fraction, check_training
from deq_core.train.deq_config import DEQConfig, deq_section

ModelName = Literal[
    "deq_transformer", "deq_trellisnet", "transformer_xl", "transformer_tied", "trellisnet", "lstm", "gru", "tcn"
]
MODELS: tuple[str, ...] = typing.get_args(ModelName)
DEQ_MODELS = ("deq_transformer", "deq_trellisnet")
TRANSFORMERS = ("deq_transformer", "transformer_xl", "transformer_tied")
TaskName = Literal["copy_memory", "lm"]
HeadName = Literal["linear", "adaptive"]


@dataclass(frozen=True)
class Config:
    """Settings of a run. Sizes are in units (widths), positions (lengths) or optimizer steps.

    Task:
        task: "copy_memory" or "lm" (word-level language modeling).
        T: copy-memory horizon; sequences have T + 20 positions.
        n_valid, n_test: copy memory: sizes of the fixed evaluation sets.
    Language modeling (task "lm"):
        corpus: "ptb", "wikitext-103", "wikitext-103-raw" (found in the local Hugging Face cache unless data_dir is
            set), or any name for a directory given by data_dir (PTB is lowercased).
        data_dir: directory with train.txt, valid.txt, test.txt ("": the Hugging Face cache). cache_dir: where the
            tokenized splits are cached ("": DATA_DIR/.deq_lm_cache, or ~/.cache/deq_lm for Hugging Face corpora).
        tokenizer: "word" (the papers) or "sentencepiece". vocab_size: sentencepiece pieces (required), or word level
            the most frequent words kept (0: all). min_freq: rarer training words become <unk>.
        tgt_len: positions per training segment; eval_tgt_len: per evaluation segment (0: tgt_len);
            eval_batch_size: columns of the evaluation stream. Memory (mem_len) and TrellisNet history are carried
            from one segment to the next in training and in evaluation.
        head: "linear" softmax or "adaptive" input + softmax (cutoffs, div_val); tie_weights: the softmax shares the
            input embedding (and, adaptive, its projections).
    Model:
        model: one of MODELS. d_embed: embedding width. d_model: transformer width, or hidden width of
        TrellisNet / LSTM / GRU / TCN. n_heads, d_head, d_ff: attention heads, head width, FFN width.
        n_layers: depth of the explicit networks (Transformer-XL layers, unrolled cell steps, RNN layers, TCN levels).
        mem_len: memory (past states) carried across segments. kernel, dilation: TrellisNet / TCN convolutions.
        pre_ln: pre-LayerNorm transformer blocks. weight_norm: on the cells' linear maps. dropout: variational
        dropout in the cells (ordinary dropout in the TCN).
    DEQ (``deq``, a :class:`deq_core.train.deq_config.DEQConfig`; ``deq.max_iter=12`` on the command line):
        the DEQ models' solvers, limits, backward mode ("implicit", "phantom", "jfb"), evaluation limits, jittered
        training limit, unrolled pretraining and Jacobian regularization; it builds their layer
        (``deq_lm.models.build_deq``). Defaults here: Anderson both ways, limits 20 / 20, tol 1e-3 / 1e-4.
    Training:
        steps: optimizer steps. batch_size: global batch (over processes and accumulation). grad_accum: micro-batches
        per step. lr, warmup_steps, min_lr_ratio: Adam with linear warmup, then cosine decay to lr * min_lr_ratio.
        weight_decay, grad_clip (0: off), mixed_precision ("no", "fp16", "bf16"). eval_every, log_every,
        save_every (0: only at the end), keep_checkpoints: steps between evaluations / log lines / checkpoints.
        seed. stop_after: stop after this step as if interrupted (0: never; for resume tests).
        save_grads_at: write the synchronized gradients of this step to OUTPUT_DIR (0: never; for tests).
    """

    task: TaskName = "copy_memory"
    T: int = 100
    n_valid: int = 256
    n_test: int = 1000

    corpus: str = "ptb"
    data_dir: str = ""
    cache_dir: str = ""
    tokenizer: Literal["word", "sentencepiece"] = "word"
    vocab_size: int = 0
    min_freq: int = 1
    tgt_len: int = 150
    eval_tgt_len: int = 0
    eval_batch_size: int = 10
    head: HeadName = "linear"
    tie_weights: bool = False
    cutoffs: tuple[int, ...] = ()
    div_val: int = 1

    model: ModelName = "deq_transformer"
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
    weight_norm: bool = True
    dropout: float = 0.0

    deq: DEQConfig = deq_section(
        solver="anderson", max_iter=20, tol=1e-3, backward_solver="anderson", backward_max_iter=20, backward_tol=1e-4
    )

    steps: int = 1000
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 1e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    mixed_precision: Literal["no", "fp16", "bf16"] = "no"
    eval_every: int = 200
    log_every: int = 10
    save_every: int = 0
    keep_checkpoints: int = 2
    seed: int = 0
    stop_after: int = 0
    save_grads_at: int = 0

    def __post_init__(self) -> None:
        check_config(self)

    @property
    def is_deq(self) -> bool:
        return self.model in DEQ_MODELS

    @property
    def seq_len(self) -> int:
        """Positions per training sequence (segment)."""
        return self.tgt_len if self.task == "lm" else self.T + 20

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def check_config(cfg: Config) -> None:
    """Raise ValueError naming the key and the valid values for any setting out of range."""
    check_training(cfg)  # optimizer steps, batch, periods, learning rate (the deq section checks itself)
    check_choice(cfg, "task", "model", "tokenizer", "head")
    check_at_least(cfg, 1, "T", "n_valid", "n_test", "d_embed", "d_model", "n_heads", "d_head", "d_ff", "n_layers")
    check_at_least(cfg, 1, "kernel", "dilation", "min_freq", "tgt_len", "eval_batch_size", "div_val")
    check_at_least(cfg, 0, "mem_len", "save_grads_at", "vocab_size", "eval_tgt_len")
    check_fraction(cfg, "dropout", closed=False)
    check_fraction(cfg, "min_lr_ratio")
    if not cfg.corpus:
        raise ValueError("corpus must be a name, e.g. ptb, wikitext-103 or the name of your --data-dir corpus.")
    if cfg.tokenizer == "sentencepiece" and cfg.vocab_size < 3:
        raise ValueError(
            f"the sentencepiece tokenizer needs vocab_size >= 3 (e.g. vocab_size=8000), got {cfg.vocab_size}."
        )
    if list(cfg.cutoffs) != sorted(set(cfg.cutoffs)) or any(c < 1 for c in cfg.cutoffs):
        raise ValueError(f"cutoffs must be strictly increasing positive token ids, got {cfg.cutoffs}.")
    if cfg.cutoffs and cfg.head != "adaptive":
        raise ValueError(f"cutoffs {cfg.cutoffs} need head=adaptive (the linear head has one cluster).")
    if cfg.task == "copy_memory" and (cfg.head != "linear" or cfg.tie_weights):
        raise ValueError("copy memory uses head=linear without tie_weights (its 10 symbols need no adaptive softmax).")
    if cfg.model in TRANSFORMERS and cfg.d_model % 2:
        raise ValueError(f"d_model must be even for transformer models (sinusoidal positions), got {cfg.d_model}.")
