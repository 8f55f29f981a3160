"""Named presets.

- ``copy400-*``: the DEQ paper's Table 1 setting, T = 400, about 14K parameters each (sized for a GPU).
- ``copy400-cpu-*``: the same at a budget one CPU thread trains in about 2 hours (3000 steps of 32, the ``copy-*``
  recipe): the runs of the T = 400 claims.
- ``copy-*``: the same models at a CPU-sized horizon (T = 100, 120 positions), one budget for all (1500 steps of
  32 sequences, Adam 2e-3): the measured table of docs/deq-lm-results.md.
- ``copy-deq-transformer-quick``: the main job of ``python -m deq_lm.train`` with no arguments (400 steps, a few
  minutes on a CPU).
- ``tiny-*``: one per model, a few seconds each, for tests; ``tiny-lm-*``: language modeling on a corpus the tests
  write (pass ``--data-dir``).
- ``ptb-*``, ``wt103-*``: the language models of the DEQ paper's Tables 2-3 and the JR paper's Table 1 with the
  papers' hyperparameters (sized for GPUs; ``PAPER_RESULTS`` holds the published perplexities, and the table of
  docs/deq-lm-configs.md says which settings come from the authors' scripts and which are derived from the published
  parameter counts).
- ``pydoc-*``: the CPU-scale language-modeling comparison (DEQ-Transformer, the same with Jacobian regularization,
  its Transformer-XL twin) on Python's documentation text (``corpus=pydoc``, written offline from ``pydoc_data``),
  one budget for all.
- ``pdocs-*``: the claims runs of ``python -m lab.lm claims`` (run from the repository's root; DEQ paper Tables 2-4, JR
  paper Table 1) on the >= 1M-token Python documentation corpus (``configs/pythondocs.py`` says how they are sized).
"""

from __future__ import annotations

from deq_core.train.deq_config import REFERENCE_STOP, deq_settings
from deq_core.train.run_config import replace_config

from . import pythondocs
from .config import MODELS, Config

# About 14K parameters each (TCN 16K, as in the paper); counts in the table of docs/deq-lm-configs.md.
_COPY_MODELS: dict[str, dict[str, object]] = {
    "deq-transformer": dict(
        model="deq_transformer", d_embed=16, d_model=32, n_heads=2, d_head=16, d_ff=96,
        **deq_settings(
            solver="anderson", max_iter=12, tol=1e-3, backward_solver="anderson", backward_max_iter=12,
            backward_tol=1e-3, eval_max_iter=24, pretrain_steps=500, pretrain_depth=4, max_iter_jitter=2,
        ),
    ),  # fmt: skip
    "deq-trellisnet": dict(
        model="deq_trellisnet", d_embed=16, d_model=30, kernel=2, dilation=1,
        **deq_settings(solver="anderson", max_iter=15, tol=1e-3, backward_max_iter=15, backward_tol=1e-3),
    ),  # fmt: skip
    "tcn": dict(model="tcn", d_embed=10, d_model=11, n_layers=8, kernel=8),
    "lstm": dict(model="lstm", d_embed=10, d_model=52, n_layers=1),
    "gru": dict(model="gru", d_embed=10, d_model=61, n_layers=1),
}  # fmt: skip
# The ablation of the copy tables: the DEQ-Transformer's cell (same parameters and recipe) unrolled 12 times and
# trained by backpropagation; no solver runs, so its DEQ settings are inert.
_COPY_MODELS["transformer-tied"] = dict(_COPY_MODELS["deq-transformer"], model="transformer_tied", n_layers=12)

_CPU_BUDGET = dict(T=100, steps=1500, batch_size=32, lr=2e-3, warmup_steps=50, min_lr_ratio=0.05, eval_every=250)
_PAPER_BUDGET = dict(T=400, steps=15_000, batch_size=32, lr=5e-4, warmup_steps=500, eval_every=1000, save_every=1000)
# At T = 400 the DEQ-Transformer's attention runs as one fused kernel: the same function, a training step about 3x
# faster on a CPU thread (results/profile_copy400.md).
# The DEQ-TrellisNet 33 wide: 13,832 parameters, within 2 % of the DEQ-Transformer's 14,090 (30 wide: 11,870, -16 %).
# The T = 400 runs reproduce Table 1: the reference code's stopping rule (the batch's residual), Anderson's history
# (m = 6, locuslab/deq lib/solvers.py), forward and backward, and evaluation at the training limit (the reference
# code evaluates with the training f_thres).
_COPY400_SOLVE = deq_settings(**REFERENCE_STOP, solver_options=("m=6",), backward_options=("m=6",), eval_max_iter=None)
_COPY400_SETTINGS: dict[str, dict[str, object]] = {
    # FFN 99 wide: 14,096 parameters with the reference cell (LayerNorms without gain or bias, an output bias, the
    # injection without weight norm), as the 14,090 of the first runs' cell at 96
    "deq-transformer": dict(attention="fused", d_ff=99, **_COPY400_SOLVE),
    "deq-trellisnet": dict(d_model=33, **_COPY400_SOLVE),
}
_COPY400_SETTINGS["transformer-tied"] = _COPY400_SETTINGS["deq-transformer"]  # the ablation keeps its DEQ's settings
# The claims runs of T = 400 on one CPU thread (results/profile_copy400.md sizes the budget): the T = 100 table's recipe
# (Adam 2e-3, warmup 50, cosine to 5 %) with twice its steps; checkpoints at every validation, so a run resumes.
_COPY400_CPU_BUDGET = dict(_CPU_BUDGET, T=400, steps=3000, save_every=250)
# Unrolled (weight-tied, depth 4) pretraining finds the copy solution; the DEQ then moves it to the equilibrium.
_MAIN_JOB = dict(steps=400, **deq_settings(pretrain_steps=250), lr=5e-3, eval_every=50)

_TINY_MODELS: dict[str, dict[str, object]] = {
    "deq-transformer": dict(model="deq_transformer", d_model=8, n_heads=2, d_head=4, d_ff=16),
    "deq-trellisnet": dict(model="deq_trellisnet", d_model=8),
    "transformer-xl": dict(model="transformer_xl", d_model=8, n_heads=2, d_head=4, d_ff=16, n_layers=2),
    "transformer-tied": dict(model="transformer_tied", d_model=8, n_heads=2, d_head=4, d_ff=16, n_layers=3),
    "trellisnet": dict(model="trellisnet", d_model=8, n_layers=3),
    "lstm": dict(model="lstm", d_model=12, n_layers=1),
    "gru": dict(model="gru", d_model=12, n_layers=1),
    "tcn": dict(model="tcn", d_model=8, n_layers=3, kernel=3),
}
_TINY_BUDGET = dict(
    T=6, n_valid=16, n_test=16, d_embed=8, steps=6, batch_size=8, lr=1e-2, warmup_steps=0, eval_every=3, log_every=1,
    **deq_settings(max_iter=15, backward_max_iter=15, tol=1e-4, backward_tol=1e-4),
)  # fmt: skip


_TINY_LM_MODELS: dict[str, dict[str, object]] = {
    "deq-transformer": dict(model="deq_transformer", d_model=8, n_heads=2, d_head=4, d_ff=16, mem_len=8),
    "transformer-xl": dict(model="transformer_xl", d_model=8, n_heads=2, d_head=4, d_ff=16, n_layers=2, mem_len=8),
    "deq-trellisnet": dict(model="deq_trellisnet", d_model=8),
}
_TINY_LM_BUDGET = dict(
    task="lm", corpus="tiny", tgt_len=8, eval_tgt_len=8, batch_size=4, eval_batch_size=2, d_embed=8, steps=8, lr=1e-2,
    warmup_steps=0, eval_every=4, log_every=1,
    **deq_settings(max_iter=15, backward_max_iter=15, tol=1e-4, backward_tol=1e-4), tie_weights=True,
)  # fmt: skip

# CPU-scale language modeling: ~100K training tokens of Python documentation, words seen once become <unk>.
_PYDOC_BUDGET = dict(
    task="lm", corpus="pydoc", min_freq=2, tgt_len=64, mem_len=64, eval_tgt_len=64, batch_size=16, eval_batch_size=8,
    d_embed=128, d_model=128, n_heads=4, d_head=32, d_ff=512, dropout=0.1, tie_weights=True,
    steps=1200, lr=1e-3, warmup_steps=100, min_lr_ratio=0.05, grad_clip=0.25, eval_every=200, log_every=10,
    save_every=200,
)  # fmt: skip
_PYDOC_DEQ = dict(
    model="deq_transformer",
    **deq_settings(
        solver="anderson", max_iter=20, tol=1e-3, backward_solver="anderson", backward_max_iter=20, backward_tol=1e-3,
        eval_max_iter=30, pretrain_steps=200, pretrain_depth=2, max_iter_jitter=2,
    ),
)  # fmt: skip
_PYDOC_MODELS: dict[str, dict[str, object]] = {
    "deq-transformer": _PYDOC_DEQ,
    # The JR paper's recipe: lower limits (12-14 instead of 30), weight ~2 applied with probability ~0.35-0.4.
    "deq-transformer-jr": {
        **_PYDOC_DEQ,
        **deq_settings(max_iter=12, backward_max_iter=12, jac_weight=2.0, jac_prob=0.4),
    },  # fmt: skip
    "transformer-xl": dict(model="transformer_xl", n_layers=4),
}


# --- The papers' language models (GPU scale) --------------------------------------------------------------------
WT103_CUTOFFS = (20_000, 40_000, 200_000)  # Transformer-XL / DEQ-Transformer adaptive input and softmax
TRELLIS_WT103_CUTOFFS = (2_800, 20_000, 76_000)  # TrellisNet / DEQ-TrellisNet split softmax (tied, one width)

_PTB = dict(task="lm", corpus="ptb", head="linear", tie_weights=True)
_WT103 = dict(task="lm", corpus="wikitext-103", head="adaptive", tie_weights=True, eval_batch_size=10)
# DEQ-Transformer, authors' script (locuslab/deq DEQ-Sequence/wt103_deq_transformer.sh, commit 1fb7059).
_WT103_DEQ_TRANSFORMER = dict(
    **_WT103, model="deq_transformer", cutoffs=WT103_CUTOFFS, div_val=4, d_embed=700, d_model=700, n_heads=10,
    d_head=70, d_ff=48_000, dropout=0.05, tgt_len=150, mem_len=150, eval_tgt_len=150, batch_size=56, lr=2.5e-4,
    warmup_steps=16_000, steps=300_000, grad_clip=0.25,
    **deq_settings(
        pretrain_steps=32_000, pretrain_depth=2, solver="anderson", solver_options=("m=6",), max_iter=30, tol=1e-3,
        backward_solver="broyden", backward_max_iter=35, backward_tol=1e-4, **REFERENCE_STOP,
    ),
    eval_every=5_000, save_every=5_000, log_every=200,
)  # fmt: skip
# Transformer-XL base (kimiyoung/transformer-xl pytorch/run_wt103_base.sh): the DEQ paper's "medium, 16 layers".
_WT103_TXL_BASE = dict(
    **_WT103, model="transformer_xl", weight_norm=False, cutoffs=WT103_CUTOFFS, div_val=1, d_embed=410, d_model=410,
    n_heads=10, d_head=41, d_ff=2_100, n_layers=16, dropout=0.1, tgt_len=150, mem_len=150, eval_tgt_len=150,
    batch_size=60, lr=2.5e-4, warmup_steps=0, steps=200_000, grad_clip=0.25, eval_every=5_000, save_every=5_000,
    log_every=200,
)  # fmt: skip
# Small models: widths derived from the published counts (138M total, 4.5M non-embedding; no script was released).
_WT103_SMALL = dict(d_embed=500, d_model=500, n_heads=10, d_head=50, d_ff=2_000, cutoffs=WT103_CUTOFFS, div_val=1)
# DEQ-TrellisNet, authors' script (locuslab/deq DEQModel/run_wt103_deq_trellisnet.sh, commit 77ec1bb). Its Broyden
# threshold 45 is 46 calls of f forward (z0, then 45 steps); the backward's first call, at u = 0, returns the gradient
# our adjoint solve starts from, so 45 there.
_WT103_DEQ_TRELLIS = dict(
    **_WT103, model="deq_trellisnet", cutoffs=TRELLIS_WT103_CUTOFFS, div_val=1, d_embed=500, d_model=1_500, kernel=2,
    dilation=1, dropout=0.1, tgt_len=100, batch_size=49, lr=1e-3, warmup_steps=0, steps=300_000, grad_clip=0.07,
    **deq_settings(
        pretrain_steps=30_000, pretrain_depth=40, solver="broyden", max_iter=46, backward_solver="broyden",
        backward_max_iter=45, tol=1e-3, backward_tol=1e-4, **REFERENCE_STOP,
    ),
    eval_every=5_000, save_every=5_000, log_every=200,
)  # fmt: skip
# DEQ-TrellisNet on PTB: "the TrellisNet settings without the auxiliary loss" (locuslab/trellisnet word_ptb.py
# defaults: emsize 400, nhid 1000, nout 400, seq_len 110, batch 16, dropout 0.45, wdecay 1.2e-6). The solver limits
# and Adam (TrellisNet used SGD, lr 20) are ours: no script was released.
_PTB_TRELLIS = dict(
    **_PTB, d_embed=400, d_model=1_000, kernel=2, dilation=1, dropout=0.45, weight_decay=1.2e-6, tgt_len=110,
    batch_size=16, lr=2e-3, warmup_steps=1_000, steps=100_000, grad_clip=0.225, eval_every=2_000, save_every=2_000,
    log_every=100,
)  # fmt: skip

_PAPER_MODELS: dict[str, dict[str, object]] = {
    "ptb-deq-trellisnet": dict(
        **_PTB_TRELLIS, model="deq_trellisnet",
        **deq_settings(
            solver="broyden", max_iter=45, backward_solver="broyden", backward_max_iter=45, tol=1e-3,
            backward_tol=1e-4, pretrain_steps=10_000, pretrain_depth=20, **REFERENCE_STOP,
        ),
    ),  # fmt: skip
    "ptb-trellisnet-60": dict(**_PTB_TRELLIS, model="trellisnet", n_layers=60),
    "wt103-deq-trellisnet": _WT103_DEQ_TRELLIS,
    "wt103-trellisnet-70": dict(
        {**_WT103_DEQ_TRELLIS, "d_embed": 512, "batch_size": 48, **deq_settings(pretrain_steps=0, pretrain_depth=2)},
        model="trellisnet", n_layers=70,
    ),
    "wt103-deq-transformer-medium-adaptive": _WT103_DEQ_TRANSFORMER,
    # Same layer without adaptive input (div_val 1): widths derived from 172M total / 43M non-embedding.
    "wt103-deq-transformer-medium": {**_WT103_DEQ_TRANSFORMER, "div_val": 1, "d_embed": 480, "d_model": 480,
                                     "n_heads": 8, "d_head": 60, "d_ff": 43_000},
    "wt103-deq-transformer-small": {**_WT103_DEQ_TRANSFORMER, **_WT103_SMALL, "dropout": 0.1},
    # The JR paper's runs (locuslab/deq DEQ-Sequence/wt103_deq_transformer_reg.sh and _preln_reg.sh).
    "wt103-deq-transformer-postln-jr": {
        **_WT103_DEQ_TRANSFORMER, "dropout": 0.06, "mem_len": 300,
        **deq_settings(
            max_iter=12, backward_max_iter=13, max_iter_jitter=2, jac_weight=1.9, jac_prob=0.35, jac_growth=0.1,
            jac_every=35_000,
        ),
    },  # fmt: skip
    "wt103-deq-transformer-preln-jr": {
        **_WT103_DEQ_TRANSFORMER, "dropout": 0.06, "mem_len": 300, "pre_ln": True,
        **deq_settings(
            max_iter=14, backward_max_iter=14, max_iter_jitter=2, jac_weight=2.0, jac_prob=0.4, jac_growth=0.1,
            jac_every=30_000,
        ),
    },  # fmt: skip
    "wt103-transformer-xl-medium-16": _WT103_TXL_BASE,
    # 18 layers with the DEQ's adaptive input (div_val 4): widths derived from 110M total / 72M non-embedding.
    "wt103-transformer-xl-medium-18-adaptive": {**_WT103_TXL_BASE, "div_val": 4, "d_embed": 700, "d_model": 700,
                                                "d_head": 70, "d_ff": 1_500, "n_layers": 18, "warmup_steps": 16_000},
    "wt103-transformer-xl-small-4": {**_WT103_TXL_BASE, **_WT103_SMALL, "n_layers": 4},
    "wt103-transformer-tied-16": {**_WT103_TXL_BASE, **_WT103_SMALL, "model": "transformer_tied", "n_layers": 16},
}  # fmt: skip

# Published test perplexities (and parameter counts) of the rows these presets reproduce.
PAPER_RESULTS: dict[str, str] = {
    "ptb-deq-trellisnet": "DEQ Table 2: 24M, 57.1 (memory 1.2 GB)",
    "ptb-trellisnet-60": "DEQ Table 2: 60-layer TrellisNet, 24M, 57.0 (8.5 GB)",
    "wt103-deq-trellisnet": "DEQ Table 3: 180M, 29.0 (3.3 GB)",
    "wt103-trellisnet-70": "DEQ Table 3: 70-layer TrellisNet, 180M, 29.2 (24.7 GB)",
    "wt103-deq-transformer-medium-adaptive": "DEQ Table 3: 110M, 23.2 (3.7 GB); JR Table 1: 98M, 24.0, 30 NFE, 3.1x",
    "wt103-deq-transformer-medium": "DEQ Table 3: 172M, 24.2 (2.7 GB)",
    "wt103-deq-transformer-small": "DEQ Table 3: 138M, 32.4 (1.1 GB)",
    "wt103-deq-transformer-postln-jr": "JR Table 1: 98M, 24.9, 12 NFE, 1.5x training time",
    "wt103-deq-transformer-preln-jr": "JR Table 1: 98M, 24.5, 14 NFE, 1.6x training time",
    "wt103-transformer-xl-medium-16": "DEQ Table 3: 165M, 24.3 (8.5 GB)",
    "wt103-transformer-xl-medium-18-adaptive": "DEQ Table 3: 110M, 23.6 (9.0 GB); JR Table 1: 24.1, 1x",
    "wt103-transformer-xl-small-4": "DEQ Table 3: 139M, 35.8 (4.8 GB)",
    "wt103-transformer-tied-16": "DEQ Table 3: weight-tied 16 layers, 138M, 34.9 (6.8 GB)",
}


def _tiny_twin(paper: Config) -> Config:
    """The CPU-test-sized version of a paper preset: same model kind, head, tying, LayerNorm placement, solvers and
    Jacobian schedule, tiny widths and budget (for a corpus of a few dozen words)."""
    model = paper.model
    changes: dict[str, object] = dict(
        _TINY_LM_BUDGET, data_dir="", d_model=8, n_heads=2, d_head=4, d_ff=16, n_layers=min(model.n_layers, 3),
        mem_len=min(model.mem_len, 8), cutoffs=(4, 8) if model.head == "adaptive" else (),
        dropout=min(model.dropout, 0.1), weight_decay=0.0, grad_clip=1.0, save_every=0,
        **deq_settings(
            eval_max_iter=None, pretrain_steps=min(paper.deq.pretrain_steps, 2), pretrain_depth=2,
            jac_every=min(paper.deq.jac_every, 4), max_iter_jitter=min(paper.deq.max_iter_jitter, 2),
        ),
    )  # fmt: skip
    if model.name in ("deq_trellisnet", "trellisnet"):
        changes["d_model"] = 12
    if model.head == "adaptive":
        changes["d_embed"] = 16  # div_val 4: cluster widths 16, 4, 1
    return replace_config(paper, changes)


def _preset(*settings: dict[str, object]) -> Config:
    """The config of the merged settings dicts (later ones win; a short name is its section's setting, ``lr`` for
    ``optim.lr``; DEQ settings as ``deq.`` keys)."""
    merged: dict[str, object] = {}
    for part in settings:
        merged.update(part)
    return replace_config(Config(), merged)


def _build() -> dict[str, Config]:
    presets: dict[str, Config] = {}
    for name, settings in _COPY_MODELS.items():
        presets[f"copy-{name}"] = _preset(_CPU_BUDGET, settings)
        presets[f"copy400-{name}"] = _preset(_PAPER_BUDGET, settings, _COPY400_SETTINGS.get(name, {}))
        presets[f"copy400-cpu-{name}"] = _preset(_COPY400_CPU_BUDGET, settings, _COPY400_SETTINGS.get(name, {}))
    presets["copy-deq-transformer-quick"] = replace_config(presets["copy-deq-transformer"], _MAIN_JOB)
    for name, settings in _TINY_MODELS.items():
        presets[f"tiny-{name}"] = _preset(_TINY_BUDGET, settings)
    for name, settings in _TINY_LM_MODELS.items():
        presets[f"tiny-lm-{name}"] = _preset(_TINY_BUDGET, _TINY_LM_BUDGET, settings)
    for name, settings in _PAPER_MODELS.items():
        presets[name] = _preset(settings)
        presets[f"tiny-{name}"] = _tiny_twin(presets[name])
    for name, settings in _PYDOC_MODELS.items():
        presets[f"pydoc-{name}"] = _preset(_PYDOC_BUDGET, settings)
    for name, settings in pythondocs.MODELS.items():
        presets[f"{pythondocs.PREFIX}-{name}"] = _preset(pythondocs.BUDGET, settings)
    for name, settings in pythondocs.PLATEAU_MODELS.items():
        presets[f"{pythondocs.PLATEAU_PREFIX}-{name}"] = _preset(pythondocs.PLATEAU_BUDGET, settings)
    for name, settings in pythondocs.PLATEAU32_MODELS.items():
        presets[f"{pythondocs.PLATEAU32_PREFIX}-{name}"] = _preset(pythondocs.PLATEAU32_BUDGET, settings)
    for name, settings in pythondocs.TRELLIS_MODELS.items():
        presets[f"{pythondocs.TRELLIS_PREFIX}-{name}"] = _preset(pythondocs.TRELLIS_BUDGET, settings)
    assert {c.model.name for c in presets.values()} == set(MODELS)
    return presets


PRESETS: dict[str, Config] = _build()


def get_config(name: str) -> Config:
    """The preset ``name``; ValueError listing the valid names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown config {name!r}; valid configs: {', '.join(sorted(PRESETS))}.")
    return PRESETS[name]
