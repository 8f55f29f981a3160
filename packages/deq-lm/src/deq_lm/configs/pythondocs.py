"""Presets of the CPU-scale claims runs (``pdocs-*``) on the Python documentation corpus.

The corpus is ``data/pythondocs_corpus.py``: about 1.2M training tokens and a 10,000-word vocabulary, with everything
rarer mapped to ``<unk>``. All presets of a group train on the same tokens: ``steps`` x ``batch_size`` x ``tgt_len``.

- ``pdocs-deq-transformer``, ``pdocs-transformer-xl``, ``pdocs-transformer-tied`` (claim 4, DEQ paper Table 3): a
  DEQ-Transformer, its Transformer-XL twin at equal non-embedding parameters, and its weight-tied twin (the DEQ's own
  cell applied ``n_layers`` times, the paper's "weight-tied" row). The DEQ's FFN is widened, as the paper's DEQs are:
  2,880 vs 512 wide gives 876,544 vs 879,360 body parameters, 0.3 % apart.
- ``pdocs-deq-transformer-jr-*`` (claim 5, JR paper Table 1): the DEQ with Jacobian regularization. The recipe is the
  authors' post-LN WikiText-103 script (our ``wt103-deq-transformer-postln-jr``): forward limit 12 with a jitter of 2,
  backward limit 13, the term applied with probability 0.35. The weight takes 0.1, 0.4 and 1.6; the paper's 1.9 is
  for a 98M model and cost 48 % perplexity on the pydoc corpus. ``-w0.4-limit8`` lowers the limits to 8 / 8 and
  applies the term on every step. The unregularized reference is ``pdocs-deq-transformer`` (limits 20 / 20).
- ``pdocs-plateau32-*`` (claim 4 at a plateau): the three claim-4 models at width 32, one head of 32. The DEQ's FFN is
  725 wide against the twin's 128: 56,650 vs 57,024 body parameters. 14,000 steps, evaluated every 1,000.
  ``PLATEAU_GAIN`` and ``PLATEAU_WINDOW`` of the repository's ``lab/lm/claims.py`` say what counts as a plateau.
- ``pdocs-plateau-*``: the same three models at width 64. The DEQ's FFN is 1,450 wide against the twin's 256:
  222,484 vs 222,592 body parameters. 9,000 steps, evaluated every 500. Their runs stayed short of the plateau rule,
  so the claims table uses the width-32 presets.
- ``pdocs-trellis-deq-trellisnet``, ``pdocs-trellis-trellisnet`` (DEQ paper Table 2): a DEQ-TrellisNet, and the same
  TrellisNet cell unrolled ``TRELLIS_DEPTH`` times with ordinary backpropagation. The input is injected into every
  application, as in the DEQ. Both have the same parameters: 16,768 non-embedding at width 32, and 320,000 in the
  tied embedding. They train ``TRELLIS_STEPS`` steps on the same batches, evaluated every 1,000.

Every DEQ here uses the solver settings of ``DEQ``: Anderson with m = 6, limits 20 / 20 with a jitter of 2, tol 1e-3
on the batch's residual, and 300 steps unrolled twice first. These are the reference code's conventions.

How the TrellisNet pair is sized, from a one-thread pilot (training steps of fresh models timed interleaved in one
process, solvers held to the pilot's iterations):

- At width 32 the 10,000-word softmax costs about 0.25 s of each step, and every unrolled layer about 5 ms.
- A step takes 333 ms for the DEQ (20 forward / 7 backward iterations) and 333 ms for the 24-layer network (381 ms at
  30 layers). 8,000 steps and eight evaluations are about 50 CPU minutes each.
- Depth 24 is the DEQ's training limit plus a margin: the unrolled network never applies the cell fewer times than
  the DEQ's training solve. The DEQ keeps about 5 % of its saved activations (1.0 vs 21.2 MiB).
- The DEQ's solve stops unconverged at its limits (relative residual 0.07 at 20 iterations, 0.04 at 30). The cell's
  state at position t reads position t - 1's, so plain iteration reaches the equilibrium of a 64-position segment
  only after 65 applications, and Anderson after about 100.
- A plateau is expected within 8,000 steps. The cosine learning rate decays to 5 % at the last step and stays below
  19 % of its peak over the last 2,000. The width-32 transformers of claim 4, with the same softmax and batches, fell
  2.0 % over steps 10,000-12,000 and under 1 % over the last 2,000 of their 14,000. The TrellisNet's body is a third
  of their size.
"""

from __future__ import annotations

from deq_core.train.deq_config import REFERENCE_STOP, deq_settings

CORPUS = "pythondocs"
PREFIX = "pdocs"

BUDGET: dict[str, object] = dict(
    task="lm", corpus=CORPUS, vocab_size=10_000, tgt_len=64, mem_len=64, eval_tgt_len=64, batch_size=16,
    eval_batch_size=10, d_embed=128, d_model=128, n_heads=4, d_head=32, d_ff=512, dropout=0.1, tie_weights=True,
    steps=3_000, lr=1e-3, warmup_steps=200, min_lr_ratio=0.05, grad_clip=0.25, eval_every=1_000, log_every=20,
    save_every=250,
)  # fmt: skip

DEQ: dict[str, object] = dict(
    model="deq_transformer", d_ff=2_880,
    **deq_settings(
        solver="anderson", max_iter=20, tol=1e-3, backward_solver="anderson", backward_max_iter=20, backward_tol=1e-3,
        pretrain_steps=300, pretrain_depth=2, max_iter_jitter=2, solver_options=("m=6",), backward_options=("m=6",),
        **REFERENCE_STOP,
    ),
)  # fmt: skip

# The JR paper's recipe (authors' post-LN script): limits 12 (+- jitter 2) / 13, term with probability 0.35.
_JR = {**DEQ, **deq_settings(max_iter=12, backward_max_iter=13, jac_prob=0.35)}
JR_SETTINGS: dict[str, dict[str, object]] = {
    "jr-w0.1": {**_JR, **deq_settings(jac_weight=0.1)},
    "jr-w0.4": {**_JR, **deq_settings(jac_weight=0.4)},
    "jr-w1.6": {**_JR, **deq_settings(jac_weight=1.6)},
    "jr-w0.4-limit8": {
        **_JR, **deq_settings(jac_weight=0.4, jac_prob=1.0, max_iter=8, backward_max_iter=8, max_iter_jitter=1),
    },  # fmt: skip
}  # fmt: skip

MODELS: dict[str, dict[str, object]] = {
    "deq-transformer": DEQ,
    "transformer-xl": dict(model="transformer_xl", n_layers=4, weight_norm=False),  # as Transformer-XL: no weight norm
    "transformer-tied": {**DEQ, "model": "transformer_tied", "n_layers": 8, **deq_settings(pretrain_steps=0)},
    **{f"deq-transformer-{name}": settings for name, settings in JR_SETTINGS.items()},
}

PLATEAU_PREFIX = "pdocs-plateau"
PLATEAU_BUDGET: dict[str, object] = {
    **BUDGET, "d_embed": 64, "d_model": 64, "n_heads": 2, "d_head": 32, "d_ff": 256, "steps": 9_000, "eval_every": 500,
}  # fmt: skip
PLATEAU_MODELS: dict[str, dict[str, object]] = {
    "deq-transformer": {**DEQ, "d_ff": 1_450},
    "transformer-xl": MODELS["transformer-xl"],
    "transformer-tied": {**MODELS["transformer-tied"], "d_ff": 1_450},
}

# Width 32: one head of 32; the DEQ's FFN 725 against the twin's 128 (56,650 vs 57,024 body parameters). In solve
# mode the DEQ runs 2.4x faster than at width 64 (4,300 vs 1,600-1,900 tokens/s at 13-15 NFE), which fits 14,000
# steps per run, evaluated every 1,000.
PLATEAU32_PREFIX = "pdocs-plateau32"
PLATEAU32_BUDGET: dict[str, object] = {
    **PLATEAU_BUDGET, "d_embed": 32, "d_model": 32, "n_heads": 1, "d_head": 32, "d_ff": 128, "steps": 14_000,
    "eval_every": 1_000,
}  # fmt: skip
PLATEAU32_MODELS: dict[str, dict[str, object]] = {
    name: {**settings, "d_ff": 725} if "d_ff" in settings else settings for name, settings in PLATEAU_MODELS.items()
}

# DEQ-TrellisNet vs the same cell unrolled TRELLIS_DEPTH times, width 32 (see the docstring).
TRELLIS_PREFIX = "pdocs-trellis"
TRELLIS_DEPTH = 24
TRELLIS_STEPS = 8_000
TRELLIS_BUDGET: dict[str, object] = {
    **BUDGET, "d_embed": 32, "d_model": 32, "kernel": 2, "dilation": 1, "steps": TRELLIS_STEPS, "eval_every": 1_000,
}  # fmt: skip
_DEQ_SOLVER = {k: v for k, v in DEQ.items() if k.startswith("deq.")}
TRELLIS_MODELS: dict[str, dict[str, object]] = {
    "deq-trellisnet": {"model": "deq_trellisnet", **_DEQ_SOLVER},
    "trellisnet": {"model": "trellisnet", "n_layers": TRELLIS_DEPTH},
}
