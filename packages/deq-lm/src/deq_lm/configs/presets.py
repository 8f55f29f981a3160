"""Named presets.

- ``copy400-*``: the DEQ paper's Table 1 setting, T = 400, about 14K parameters each (sized for a GPU).
- ``copy-*``: the same models at a CPU-sized horizon (T = 100, 120 positions), one budget for all (1500 steps of
  32 sequences, Adam 2e-3): the measured table of the README.
- ``copy-deq-transformer-quick``: the main job of ``python -m deq_lm.train`` with no arguments (400 steps, a few
  minutes on a CPU).
- ``tiny-*``: one per model, a few seconds each, for tests.
"""

from __future__ import annotations

import dataclasses

from .config import MODELS, Config

# About 14K parameters each (TCN 16K, as in the paper); counts in the README table.
_COPY_MODELS: dict[str, dict[str, object]] = {
    "deq-transformer": dict(
        model="deq_transformer", d_embed=16, d_model=32, n_heads=2, d_head=16, d_ff=96,
        solver="anderson", max_iter=12, tol=1e-3, backward_solver="anderson", backward_max_iter=12,
        backward_tol=1e-3, eval_max_iter=24, pretrain_steps=500, pretrain_depth=4, max_iter_jitter=2,
    ),
    "deq-trellisnet": dict(
        model="deq_trellisnet", d_embed=16, d_model=30, kernel=2, dilation=1,
        solver="anderson", max_iter=15, tol=1e-3, backward_max_iter=15, backward_tol=1e-3,
    ),
    "tcn": dict(model="tcn", d_embed=10, d_model=11, n_layers=8, kernel=8),
    "lstm": dict(model="lstm", d_embed=10, d_model=52, n_layers=1),
    "gru": dict(model="gru", d_embed=10, d_model=61, n_layers=1),
}  # fmt: skip

_CPU_BUDGET = dict(T=100, steps=1500, batch_size=32, lr=2e-3, warmup_steps=50, min_lr_ratio=0.05, eval_every=250)
_PAPER_BUDGET = dict(T=400, steps=15_000, batch_size=32, lr=5e-4, warmup_steps=500, eval_every=1000, save_every=1000)
# Unrolled (weight-tied, depth 4) pretraining finds the copy solution; the DEQ then moves it to the equilibrium.
_MAIN_JOB = dict(steps=400, pretrain_steps=250, lr=5e-3, eval_every=50)

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
    T=6, n_valid=16, n_test=16, d_embed=8, steps=6, batch_size=8, lr=1e-2, warmup_steps=0, eval_every=3,
    log_every=1, max_iter=15, backward_max_iter=15, tol=1e-4, backward_tol=1e-4,
)  # fmt: skip


def _build() -> dict[str, Config]:
    presets: dict[str, Config] = {}
    for name, settings in _COPY_MODELS.items():
        presets[f"copy-{name}"] = Config(**{**_CPU_BUDGET, **settings})  # type: ignore[arg-type]
        presets[f"copy400-{name}"] = Config(**{**_PAPER_BUDGET, **settings})  # type: ignore[arg-type]
    presets["copy-deq-transformer-quick"] = dataclasses.replace(presets["copy-deq-transformer"], **_MAIN_JOB)  # type: ignore[arg-type]
    for name, settings in _TINY_MODELS.items():
        presets[f"tiny-{name}"] = Config(**{**_TINY_BUDGET, **settings})  # type: ignore[arg-type]
    assert {c.model for c in presets.values()} == set(MODELS)
    return presets


PRESETS: dict[str, Config] = _build()


def get_config(name: str) -> Config:
    """The preset ``name``; ValueError listing the valid names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown config {name!r}; valid configs: {', '.join(sorted(PRESETS))}.")
    return PRESETS[name]
