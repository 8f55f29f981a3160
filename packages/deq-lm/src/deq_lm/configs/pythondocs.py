"""Presets of the CPU-scale claims runs on the Python documentation corpus
(``data/pythondocs_corpus.py``: about 1.2M training tokens, 10,000-word vocabulary, everything rarer is ``<unk>``).

Claim 4 (DEQ paper, Table 3): a DEQ-Transformer against its Transformer-XL twin at equal non-embedding parameters
(the DEQ's FFN widened, as the paper's DEQs are: 2,880 vs 512 wide gives 876,544 vs 879,360 body parameters, 0.3 %
apart), and against the weight-tied unrolled twin (the DEQ's own cell applied ``n_layers`` times, the paper's
"weight-tied" row). Same tokens for all: ``steps`` x ``batch_size`` x ``tgt_len``.

Claim 5 (JR paper, Table 1): the DEQ with Jacobian regularization, the recipe of the paper's WikiText-103 runs (the
authors' post-LN script, our ``wt103-deq-transformer-postln-jr``: forward limit 12 with a jitter of 2, backward
limit 13, the term applied with probability 0.35) with the weight swept (0.1, 0.4, 1.6; the paper's 1.9 is for a
98M model and cost 48 % perplexity on the pydoc corpus) and one setting with lower limits (8 / 8) and the term on
every step. The unregularized reference is the claim-4 DEQ (limits 20 / 20).

Claim 4 at a plateau (``pdocs-plateau-*``): the budget above stops the Transformer-XL twin well before its plateau
(its valid perplexity falls another 22 % between 3,000 and 9,000 steps), and the 128-wide DEQ would need about
200 minutes for 9,000 steps, past the issue's 90 minutes per run. So the same three models at half the width (64;
the DEQ's FFN 1,450 wide against the twin's 256, 222,484 vs 222,592 body parameters), trained three times as long
(9,000 steps, the same corpus and batches), evaluated every 500 steps; ``PLATEAU_GAIN`` and ``PLATEAU_WINDOW`` of
the repository's ``lab/lm/claims.py`` say what counts as a plateau. None of the three reached it (falls of 2.6-3.5 %
over the last 2,000 steps), so the claims table's plateau rows now use the width-32 set below
(``pdocs-plateau32-*``, 14,000 steps); the width-64 presets stay for the record of that try (docs/deq-lm-results.md, run
logs).

DEQ paper, Table 2 (DEQ-TrellisNet against the 60-layer TrellisNet whose weights it ties across
depth): ``pdocs-trellis-deq-trellisnet`` against ``pdocs-trellis-trellisnet``, the same TrellisNet cell (the input
injected into every application, as in the DEQ) unrolled ``TRELLIS_DEPTH`` times with ordinary backpropagation, so both
have the same parameters (16,768 non-embedding at width 32, with 320,000 in the tied embedding), trained on the same
batches for ``TRELLIS_STEPS`` steps, evaluated every 1,000. The DEQ keeps the solver settings of every other DEQ here
(the ``DEQ`` dict: Anderson with m = 6, limits 20 / 20 with a jitter of 2, the same 20 at evaluation, tol 1e-3 on the
batch's residual, 300 steps unrolled twice first: the reference code's conventions; the first runs evaluated at 30 and
stopped on every sample's residual). Sizing, from a one-thread pilot (training steps of fresh models timed interleaved
in one process, solvers held to the iterations the pilot's training used): at width 32 the 10,000-word softmax costs
about 0.25 s of each step and every unrolled layer about 5 ms, so a step takes 333 ms for the DEQ (20 forward / 7
backward iterations) and 333 ms for the 24-layer network (381 ms at 30 layers); 8,000 steps and eight evaluations are
about 50 CPU minutes each. Depth 24 is the DEQ's training limit plus a margin: the unrolled network never applies the
cell fewer times than the DEQ's training solve, and the DEQ keeps about 5 % of its saved activations (1.0 vs 21.2 MiB).
A 400-step pilot of both showed the DEQ's solve unconverged at its limits (relative residual 0.07 at 20 iterations, 0.04
at 30): the cell's state at position t reads position t - 1's, so plain iteration reaches the equilibrium of a
64-position segment only after 65 applications (Anderson after about 100 at this point of training). Why a plateau is
expected within 8,000 steps: the learning rate decays (cosine) to 5 % at the last step and is below 19 % of its peak
over the last 2,000, and the width-32 transformers of claim 4 (57,000 non-embedding parameters, the same softmax and
batches) fell 2.0 % over steps 10,000-12,000 and under 1 % over the last 2,000 of their 14,000; the TrellisNet's body is
a third of their size.
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

# The next try at a plateau: width 64 stayed 2.6-3.5 % per 2,000 steps from one after 9,000 steps (91 minutes for
# the DEQ). At width 32 (one head of 32; the DEQ's FFN 725 against the twin's 128: 56,650 vs 57,024 body parameters)
# a pilot of the DEQ ran 2.4x faster in solve mode (4,300 vs 1,600-1,900 tokens/s at 13-15 NFE), so the three
# models train 14,000 steps each (the same batches), evaluated every 1,000 steps.
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
