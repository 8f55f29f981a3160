"""Claim 1: the synthetic 1D study of the Jacobian-regularization paper (Fig. 5), over several seeds, with the
ablation that explains the fit at the shorter training budget."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_toy.evaluate import load_experiment
from deq_toy.plots import plot_figure5
from deq_toy.runs import ensure_run
from lab.claims import Claim, ClaimResult, mean_spread

GAMMAS = (0.0, 2.0, 4.0)
NFE_FACTOR = 3.0  # fixed-point NFE(gamma 0) / NFE(gamma) must be at least this
MSE_FACTOR = 1.5  # valid MSE(gamma) must be at most this times valid MSE(gamma 0)

CLAIM = Claim(
    key="synthetic-1d",
    statement=(
        "On the synthetic 1D task, Jacobian regularization with gamma 2 and 4 makes plain fixed-point iteration "
        "converge much faster and flattens f at z* while the fit stays as good as without it."
    ),
    paper=(
        "qualitative: gamma 2, 4 learn 'the (almost) identical equilibrium function z*(x) that perfectly fits h(x)'; "
        "surfaces flat in z, convergence 'significantly' faster (no numbers printed)"
    ),
    source="jacobian-regularization-icml2021.txt, section 5.1 and Figure 5",
    threshold=(
        f"for gamma 2 and 4 (means over seeds): fixed-point NFE to |f(z)-z| <= 1e-3 at least {NFE_FACTOR:g}x lower "
        f"than gamma 0, mean |df/dz| at z* lower, valid MSE <= {MSE_FACTOR:g}x gamma 0's"
    ),
)


@dataclass(frozen=True)
class SyntheticPlan:
    """Seeds and overrides of the claim's runs and of the ablation (run at the shorter ``ablation_epochs``)."""

    seeds: tuple[int, ...]
    overrides: tuple[str, ...]
    ablation_seeds: tuple[int, ...]
    ablation_epochs: int


FULL = SyntheticPlan(seeds=(0, 1, 2), overrides=(), ablation_seeds=(0, 1, 2), ablation_epochs=100)
QUICK = SyntheticPlan(
    seeds=(0, 1),
    overrides=("n_train=256", "n_valid=128", "epochs=4", "batch_size=64", "log_every=4", "eval_every=8"),
    ablation_seeds=(0,),
    ablation_epochs=2,
)

# (label, preset, overrides) of the ablation at the shorter budget; gamma 2 unless the preset says otherwise.
ABLATION: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("gamma 0", "synthetic-gamma0", ()),
    ("gamma 2", "synthetic-gamma2", ()),
    ("gamma 2, 16 Hutchinson probes", "synthetic-gamma2", ("deq.jacobian_samples=16",)),
    ("gamma 2, lr 2e-2", "synthetic-gamma2", ("lr=2e-2",)),
    ("gamma 2, width 200 (800 parameters)", "synthetic-gamma2", ("width=200",)),
    ("f ignores z (W1 = 0): explicit net, gamma 0", "synthetic-gamma0", ("feedback=false",)),
)


def _gamma_runs(out: Path, plan: SyntheticPlan, progress: bool) -> dict[float, list[dict[str, Any]]]:
    runs: dict[float, list[dict[str, Any]]] = {}
    for gamma in GAMMAS:
        preset = f"synthetic-gamma{gamma:g}"
        runs[gamma] = [
            ensure_run(out / f"gamma{gamma:g}_seed{s}", preset, [*plan.overrides, f"seed={s}"], out, progress)
            for s in plan.seeds
        ]
    return runs


def _mean(results: Sequence[dict[str, Any]], key: str) -> float:
    return statistics.fmean(r[key] for r in results)


def ablation_runs(out: Path, plan: SyntheticPlan, progress: bool) -> dict[str, list[dict[str, Any]]]:
    """Train (or read) the ablation runs at ``plan.ablation_epochs``: label -> results of every ablation seed."""
    runs = {}
    for i, (label, preset, extra) in enumerate(ABLATION):
        overrides = [*plan.overrides, f"epochs={plan.ablation_epochs}", *extra]
        runs[label] = [
            ensure_run(out / "ablation" / f"{i}_seed{s}", preset, [*overrides, f"seed={s}"], out, progress)
            for s in plan.ablation_seeds
        ]
    return runs


def ablation_table(runs: dict[str, list[dict[str, Any]]], epochs: int) -> str:
    """Markdown table of the ablation: mean ± std over seeds of valid MSE, fixed-point NFE and mean |df/dz|."""
    lines = [
        f"| setting ({epochs} epochs) | valid MSE | fixed-point NFE | mean abs(df/dz) at z* |",
        "|---|---|---|---|",
    ]
    for label, res in runs.items():
        cells = [mean_spread([r[k] for r in res], 3) for k in ("mse", "nfe_fixed_point_mean", "dfdz_mean")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def verdict(runs: dict[float, list[dict[str, Any]]]) -> tuple[bool, str]:
    """The claim's verdict from the runs of every gamma, and our numbers as one table cell."""
    base_nfe, base_slope, base_mse = (_mean(runs[0.0], k) for k in ("nfe_fixed_point_mean", "dfdz_mean", "mse"))
    holds, parts = True, []
    for gamma in GAMMAS:
        res = runs[gamma]
        nfe, slope, mse = (_mean(res, k) for k in ("nfe_fixed_point_mean", "dfdz_mean", "mse"))
        if gamma > 0:
            holds &= base_nfe / nfe >= NFE_FACTOR and slope < base_slope and mse <= MSE_FACTOR * base_mse
        parts.append(
            f"gamma {gamma:g}: NFE {mean_spread([r['nfe_fixed_point_mean'] for r in res], 3)}, "
            f"abs(df/dz) {mean_spread([r['dfdz_mean'] for r in res], 2)}, "
            f"MSE {mean_spread([r['mse'] for r in res], 2)}"
        )
    return holds, "; ".join(parts)


READING = (
    "Reading of the full run: 16 probes instead of 1 change nothing (the estimate's noise is not the cause; with "
    "d = 1 the per-dimension normalization of the estimate changes nothing either); a 4x "
    "larger lr or width closes most of the gap; the explicit net that ignores z, the map a fully flat DEQ becomes, "
    "fits worse than gamma 0 with the same budget (a flat f must produce y's full scale alone, without the "
    "feedback gain 1/(1 - df/dz) of about 2 that gamma 0 uses). So the gap was the training budget, not a limit "
    "of the regularized model: the claim's runs train 4x longer (valid MSE flat over their last quarter)."
)


def synthetic_claim(out: Path, quick: bool, progress: bool, command: str) -> tuple[ClaimResult, str]:
    """Train the claim's runs and the ablation under OUT; return the claim's row and the ablation table."""
    plan = QUICK if quick else FULL
    holds, ours = verdict(_gamma_runs(out, plan, progress))
    ablation = ablation_runs(out, plan, progress)
    mses = "; ".join(f"{label}: {_mean(res, 'mse'):.4f}" for label, res in ablation.items())
    note = f"Ablation, valid MSE at the earlier {plan.ablation_epochs}-epoch budget (synthetic_ablation.md): {mses}."
    if not quick:
        note += " " + READING
    result = ClaimResult(CLAIM, ours=ours, holds=holds, command=command, note=note)
    first = [out / f"gamma{g:g}_seed{plan.seeds[0]}" for g in GAMMAS]
    if all(latest_complete_checkpoint(run) is not None for run in first):
        models = [(f"gamma = {g:g}", load_experiment(run)[1].model) for g, run in zip(GAMMAS, first)]
        plot_figure5(models, out / "figure5.png")
    else:  # runs restored from committed logs (results, no weights): the table is rebuilt, the figure is not
        print(
            f"{out / 'figure5.png'} not redrawn: the seed-{plan.seeds[0]} gamma runs have no weights here (run logs "
            "keep none); retrain them in another --output-dir to redraw it."
        )
    return result, ablation_table(ablation, plan.ablation_epochs)
