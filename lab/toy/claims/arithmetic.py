"""Claim 2: the student report's nested-arithmetic results (its Figures 8, 10, 11 tables), at the report's data
sizes with a compute-equivalent large-batch schedule."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from deq_core.train.files import write_json
from deq_core.train.metrics import read_metrics
from deq_toy.evaluate import load_experiment
from deq_toy.runs import ensure_run
from lab.claims import Claim, ClaimResult, mean_spread

from ..step_profile import profile_steps

REPORT = "depth-properties-of-deqs-student-report.txt"
MAX_RUN_MINUTES = 45.0  # one GRU-DEQ run's training time on one thread, at most
MIN_DEQ_ACC = 85.0  # % test accuracy the GRU-DEQ must reach
BATCH_GAP = 1.5  # points: the large-batch GRU must be within this of the batch-64 GRU
PLATEAU_GAIN = 1.0  # points of validation accuracy gained over the last quarter of the epochs, at most

ORDERING = Claim(
    key="ordering",
    statement="On the 4-operation set the GRU-DEQ is at least as accurate as the 3-layer GRU, which beats the GRU, "
    "which beats the FC network.",
    paper="test acc FC 64.58 %, GRU 80.73 %, stacked GRU 85.0 %, DEQ 87.62 %",
    source=f"{REPORT}, Figure 10 table (Models Metrics on Test Data), rows FC NN, One-layer GRU, Stacked GRU, DEQ",
    threshold="mean test acc over seeds: GRU-DEQ >= stacked GRU > GRU > FC",
)
DEQ_ACC = Claim(
    key="deq-accuracy",
    statement="The GRU-DEQ reaches at least 85 % test accuracy on the 4-operation set.",
    paper="87.62 %",
    source=f"{REPORT}, Figure 10 table, row DEQ",
    threshold=f"GRU-DEQ mean test acc over seeds >= {MIN_DEQ_ACC:g} %",
)
CONVERGED = Claim(
    key="deq-converges",
    statement="At the end of training the GRU-DEQ's forward solve reaches its tolerance (the report's never did).",
    paper="the report's ||z - f(z)|| never reached a fixed point (Figure 12, no number printed)",
    source=f"{REPORT}, section 5, Figure 12",
    threshold="test set, every seed: mean relative residual < the solver tolerance (1e-3) and >= 99 % of samples "
    "converged",
)
BATCH = Claim(
    key="batch-schedule",
    statement="The large-batch schedule used for these runs reaches the accuracy of the report's batch 64 (on the "
    "GRU, at equal epochs).",
    paper="batch 64, 40 epochs; 'accuracies began to plateau around epoch 40'",
    source=f"{REPORT}, section 5, first paragraph",
    threshold=f"abs(GRU mean test acc at batch 512 over seeds - batch 64, seed 0) <= {BATCH_GAP:g} points",
)
PLATEAU = Claim(
    key="plateau",
    statement="Every model was trained to a plateau, as the report's were.",
    paper="'the models' accuracies began to plateau around epoch 40'",
    source=f"{REPORT}, section 5, first paragraph",
    threshold=f"each run's (every seed's) valid acc gains <= {PLATEAU_GAIN:g} point over its last quarter of epochs "
    "(at least its last 2 epochs)",
)
BIASED = Claim(
    key="biased",
    statement="Trained on the 4-operation set and tested on its biased version (3x more '-'), the ordering is "
    "DEQ >= repeated GRU >= stacked GRU > GRU > FC.",
    paper="FC 62.13 %, GRU 75.00 %, stacked GRU 82.50 %, DEQ 85.9 %, repeated GRU 84.9 %",
    source=f"{REPORT}, Figure 11 table (test and biased data) and the paragraph after it",
    threshold="mean biased test acc over seeds: DEQ >= repeated GRU >= stacked GRU > GRU > FC (the runs of the rows "
    "above)",
)
TWO_OPS = Claim(
    key="two-ops",
    statement="On the 2-operation sets the GRU-DEQ is at least as accurate as the GRU (96.3 vs 96.0 %, biased "
    "94.7 vs 94.2 %).",
    paper="GRU 96.0 % (biased 94.2 %), DEQ 96.3 % (biased 94.7 %)",
    source=f"{REPORT}, Figure 8 table",
    threshold="trained on the 2-operation set: test acc GRU-DEQ >= GRU on its test set and on its biased test set",
)
REPEATED = Claim(
    key="repeated",
    statement="The 50x repeated GRU comes close to the GRU-DEQ (87.41 vs 87.62 %).",
    paper="87.41 % vs 87.62 %",
    source=f"{REPORT}, Figure 10 table, rows Repeated GRU and DEQ",
    threshold="abs(mean test acc over seeds, repeated GRU - GRU-DEQ) <= 1 point, both trained with the same schedule",
)


SPEED = Claim(
    key="speed",
    statement="A GRU-DEQ run at the report's data size (50K expressions, 40 epochs) trains in at most 45 minutes "
    "on one CPU thread (the report found the DEQ's run time 'definitely an issue').",
    paper="'The slow run time is definitely an issue for wide implementations.' (no time printed)",
    source=f"{REPORT}, section 6 (Conclusion and Future Work)",
    threshold=f"steps x median step time on one thread (10 steps at the end of training) <= {MAX_RUN_MINUTES:g} min",
)

MEASURED = (ORDERING, DEQ_ACC, CONVERGED, SPEED, BATCH, PLATEAU, TWO_OPS)
JR_NOTE = (
    "The GRU-DEQ is the report's cell trained with the Jacobian regularizer (weight 1 on every step), which the "
    "report proposes as future work (section 6); without it (run arith-deq-plain) the forward solve drifts to its "
    "50-iteration limit within 300 steps and a run does not fit the time budget."
)


@dataclass(frozen=True)
class ArithmeticPlan:
    """The runs of the claim: run name -> (preset, overrides); ``deq`` and ``plain`` name the GRU-DEQ runs with and
    without Jacobian regularization (the latter only for its NFE and step time). The runs named in :data:`SEEDED`
    are trained once per seed of ``seeds`` (folders :func:`seed_folder`), the others with seed 0 only."""

    runs: dict[str, tuple[str, tuple[str, ...]]]
    seeds: tuple[int, ...] = (0,)
    profile_steps: int = 10

    def seeds_of(self, name: str) -> tuple[int, ...]:
        """The seeds run ``name`` is trained with: the plan's for the :data:`SEEDED` runs, else seed 0."""
        return self.seeds if name in SEEDED else (0,)


# The runs the ordering claims compare: one seed's spread (about 1 point) is as large as the gaps claimed.
SEEDED = ("arith-fc", "arith-gru", "arith-stacked-gru", "arith-deq")
Results = dict[str, list[dict[str, Any]]]  # run name -> results.json of each of its seeds, in seed order


def seed_folder(name: str, seed: int) -> str:
    """The folder of run ``name`` trained with ``seed``: NAME for seed 0 (the folders of the first, one-seed runs),
    NAME-seedS otherwise."""
    return name if seed == 0 else f"{name}-seed{seed}"


def seeded(overrides: Sequence[str], seed: int) -> tuple[str, ...]:
    """The overrides of one seed's run: ``overrides`` plus ``run.seed`` (nothing added for seed 0, the default)."""
    return (*overrides, f"seed={seed}") if seed else tuple(overrides)


_LARGE = ("hidden=50", "batch_size=512", "lr=2.8e-3")
FULL = ArithmeticPlan(
    runs={
        "arith-fc": ("arith-fc", (*_LARGE, "epochs=40")),
        "arith-gru": ("arith-gru", (*_LARGE, "epochs=40")),
        "arith-stacked-gru": ("arith-stacked-gru", (*_LARGE, "epochs=20")),
        "arith-deq": ("arith-deq-jac", (*_LARGE, "epochs=40")),
        "arith-gru-batch64": ("arith-gru", ("hidden=50", "epochs=40")),
        "arith-gru-two": ("arith-gru", (*_LARGE, "epochs=40", "variant=two")),
        "arith-deq-two": ("arith-deq-jac", (*_LARGE, "epochs=40", "variant=two")),
        "arith-deq-plain": ("arith-deq", (*_LARGE, "epochs=3")),
    },
    seeds=(0, 1, 2),
)
_TINY = ("n_train=256", "n_valid=64", "n_test=64", "hidden=8", "batch_size=64", "epochs=4", "log_every=2")
QUICK = ArithmeticPlan(
    runs={
        "arith-fc": ("arith-fc-tiny", (*_TINY,)),
        "arith-gru": ("arith-gru-tiny", (*_TINY,)),
        "arith-stacked-gru": ("arith-stacked-gru-tiny", (*_TINY,)),
        "arith-deq": ("arith-deq-jac-tiny", (*_TINY,)),
        "arith-gru-batch64": ("arith-gru-tiny", (*_TINY, "batch_size=16", "lr=5e-4")),
        "arith-gru-two": ("arith-gru-tiny", (*_TINY, "variant=two")),
        "arith-deq-two": ("arith-deq-jac-tiny", (*_TINY, "variant=two")),
        "arith-deq-plain": ("arith-deq-tiny", (*_TINY,)),
    },
    seeds=(0, 1),
    profile_steps=2,
)
PLATEAU_RUNS = ("arith-fc", "arith-gru", "arith-stacked-gru", "arith-deq", "arith-gru-batch64", "arith-gru-two",
                "arith-deq-two")  # fmt: skip


def _plateau_gain(run_dir: Path) -> float:
    """Validation accuracy of the last evaluation minus that of the evaluation PLATEAU_EVALS evaluations earlier,
    where PLATEAU_EVALS is a quarter of the evaluations but at least 2 (one evaluation per epoch: the last quarter
    of the epochs, at least the last 2 epochs)."""
    valid = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("split") == "valid"]
    back = max(len(valid) // 4, 2)
    return valid[-1]["acc"] - valid[max(len(valid) - 1 - back, 0)]["acc"]


def _accs(runs: list[dict[str, Any]], test: str = "test_four") -> list[float]:
    """Test accuracy (%) of each seed's run on the test set ``test``."""
    return [float(r[test]["acc"]) for r in runs]


def _mean(runs: list[dict[str, Any]], test: str = "test_four") -> float:
    return statistics.fmean(_accs(runs, test))


def _spread(runs: list[dict[str, Any]], test: str = "test_four") -> str:
    """The seeds' accuracies (%) as ``mean ± std (n=K: a, b, c)`` (sample standard deviation), or the one value."""
    return mean_spread(_accs(runs, test), decimals=2, listed=True)


def step_profile(run_dir: Path, data_dir: Path, steps: int) -> dict[str, Any]:
    """The step profile (:func:`lab.toy.step_profile.profile_steps`) of a finished run's final model on one thread,
    on the batches of its last ``steps`` steps; measured once and kept in RUN_DIR/step_profile.json."""
    path = run_dir / "step_profile.json"
    if path.exists():
        return json.loads(path.read_text())
    _, experiment = load_experiment(run_dir, data_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        profile = profile_steps(experiment, steps, first_step=max(experiment.total_steps - steps, 0))
    finally:
        torch.set_num_threads(threads)
    record = {**dataclasses.asdict(profile), "summary": profile.summary()}
    write_json(path, record, indent=2)
    return record


def residual_note(run_dir: Path) -> str:
    """How a GRU-DEQ's training residual and forward NFE moved from the first to the last logged window."""
    train = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("split") == "train"]
    first, last = train[0], train[-1]
    return (
        f"{run_dir.name} training batches: mean relative residual {first['residual']:.2e} -> {last['residual']:.2e}, "
        f"forward NFE {first['nfe_forward']:.0f} -> {last['nfe_forward']:.0f} (limit 50), converged fraction "
        f"{first['converged']:.3f} -> {last['converged']:.3f}, between steps {first['step']} and {last['step']}"
    )


def accuracy_rows(res: Results, command: str) -> list[ClaimResult]:
    """The ordering, the GRU-DEQ's accuracy, the batch-size check and the two-operation comparison (means over the
    seeds of the runs in ``res``; the batch-64 and two-operation runs are seed 0 only)."""
    fc, gru, stacked, deq = (_mean(res[k]) for k in ("arith-fc", "arith-gru", "arith-stacked-gru", "arith-deq"))
    accs = (f"FC {_spread(res['arith-fc'])}, GRU {_spread(res['arith-gru'])}, stacked GRU "
            f"{_spread(res['arith-stacked-gru'])}, GRU-DEQ {_spread(res['arith-deq'])} %")  # fmt: skip
    gru64 = _mean(res["arith-gru-batch64"])
    two = {k: (_mean(res[f"arith-{k}-two"], "test_two"), _mean(res[f"arith-{k}-two"], "test_two_biased"))
           for k in ("gru", "deq")}  # fmt: skip
    return [
        ClaimResult(ORDERING, ours=accs, holds=deq >= stacked > gru > fc, command=command, note=JR_NOTE),
        ClaimResult(
            DEQ_ACC, ours=f"{_spread(res['arith-deq'])} %", holds=deq >= MIN_DEQ_ACC, command=command, note=JR_NOTE
        ),
        ClaimResult(
            BATCH,
            ours=f"GRU, 40 epochs: batch 512 {_spread(res['arith-gru'])} %, batch 64 {gru64:.2f} %",
            holds=abs(gru - gru64) <= BATCH_GAP,
            command=command,
        ),
        ClaimResult(
            TWO_OPS,
            ours=f"GRU {two['gru'][0]:.2f} % (biased {two['gru'][1]:.2f} %), GRU-DEQ {two['deq'][0]:.2f} % "
            f"(biased {two['deq'][1]:.2f} %)",
            holds=two["deq"][0] >= two["gru"][0] and two["deq"][1] >= two["gru"][1],
            command=command,
            note=JR_NOTE,
        ),
    ]


def solver_rows(res: Results, profiles: dict[str, dict[str, Any]], out: Path, command: str) -> list[ClaimResult]:
    """The GRU-DEQ's convergence at the end of training (every seed) and its run time on one thread (seed 0, with
    the unregularized GRU-DEQ's for comparison)."""
    tests = [r["test_four"] for r in res["arith-deq"]]
    residuals = [float(t["residual"]) for t in tests]
    converged = [float(t["converged"]) for t in tests]
    nfe = [float(t["nfe_forward"]) for t in tests]
    deq, plain = profiles["arith-deq"], profiles["arith-deq-plain"]
    arith = out / "arithmetic"
    return [
        ClaimResult(
            CONVERGED,
            ours=f"mean rel. residual {mean_spread(residuals)}, at least {100 * min(converged):.1f} % converged, "
            f"{mean_spread(nfe)} NFE",
            holds=all(r < 1e-3 for r in residuals) and min(converged) >= 0.99,
            command=command,
            note=f"{JR_NOTE} {residual_note(arith / 'arith-deq')}; {residual_note(arith / 'arith-deq-plain')}.",
        ),
        ClaimResult(
            SPEED,
            ours=f"{deq['run_minutes']:.1f} min",
            holds=deq["run_minutes"] <= MAX_RUN_MINUTES,
            command=command,
            note=f"GRU-DEQ with Jacobian regularization: {deq['summary']}. Without (arith-deq-plain, its final "
            f"weights after 3 epochs): {plain['summary']}.",
        ),
    ]


def train_seeds(
    out: Path, name: str, preset: str, overrides: Sequence[str], seeds: Sequence[int], progress: bool
) -> list[dict[str, Any]]:
    """Train (or read) run ``name`` once per seed, in OUT/arithmetic/:func:`seed_folder` (data in OUT/data); the
    results of each seed, in order."""
    return [
        ensure_run(out / "arithmetic" / seed_folder(name, s), preset, seeded(overrides, s), out / "data", progress)
        for s in seeds
    ]


def train_runs(out: Path, plan: ArithmeticPlan, progress: bool) -> Results:
    """Train (or read) every run of ``plan``, each with its seeds (:meth:`ArithmeticPlan.seeds_of`)."""
    return {
        name: train_seeds(out, name, preset, overrides, plan.seeds_of(name), progress)
        for name, (preset, overrides) in plan.runs.items()
    }


def plateau_row(out: Path, plan: ArithmeticPlan, command: str) -> ClaimResult:
    """The plateau check on every run of :data:`PLATEAU_RUNS` (every seed); ``ours`` gives each run's largest gain
    over its seeds."""
    gains = {
        name: max(_plateau_gain(out / "arithmetic" / seed_folder(name, s)) for s in plan.seeds_of(name))
        for name in PLATEAU_RUNS
    }
    gain_text = ", ".join(f"{k} {v:+.2f}" for k, v in gains.items())
    return ClaimResult(
        PLATEAU,
        ours=f"valid acc gain (points; the largest over the seeds): {gain_text}",
        holds=all(g <= PLATEAU_GAIN for g in gains.values()),
        command=command,
    )


def arithmetic_claims(out: Path, quick: bool, progress: bool, command: str, repeated: bool) -> list[ClaimResult]:
    """Train (or read) the plan's runs under OUT/arithmetic (data in OUT/data), profile the GRU-DEQs' steps and,
    with ``repeated``, train the repeated GRU; return the claim rows."""
    plan = QUICK if quick else FULL
    res = train_runs(out, plan, progress)
    profiles = {
        name: step_profile(out / "arithmetic" / name, out / "data", plan.profile_steps)
        for name in ("arith-deq", "arith-deq-plain")
    }
    rows = [*accuracy_rows(res, command), *solver_rows(res, profiles, out, command), plateau_row(out, plan, command)]
    if repeated:
        return [*rows, *repeated_rows(out, quick, progress, command, res)]
    return [*rows, *not_measured_rows((BIASED, REPEATED), REPEATED_COMMAND, "not run within this session's CPU budget")]


def not_measured_rows(claims: Sequence[Claim], command: str, note: str) -> list[ClaimResult]:
    """NOT MEASURED rows for ``claims``, each with the command that would measure it."""
    return [ClaimResult(c, ours="not run", holds=None, command=command, note=note) for c in claims]


REPEATED_COMMAND = "python -m lab.toy claims --output-dir OUT --claims synthetic,arithmetic,repeated"
REPEATED_RUN = {
    False: ("arith-repeated-gru", (*_LARGE, "epochs=40")),
    True: ("arith-repeated-gru-tiny", _TINY),
}  # quick -> (preset, overrides); the GRU-DEQ's schedule, with the plan's seeds (one seed's 40 epochs take 2 to 3
# hours on one thread: its step is bound by matrix products, 50 x 31 GRU steps forward and backward, about 2 s at
# batch 512 on an idle core)


def repeated_gap_note(rep: list[dict[str, Any]], res: Results) -> str:
    """Measured, for the repeated-GRU row: which model is ahead and by how much, against the standard deviation of
    each model's seeds (of the models with more than one seed)."""
    deq = res["arith-deq"]
    gap = _mean(deq) - _mean(rep)
    ahead = "the GRU-DEQ is ahead" if gap > 0 else "the repeated GRU is ahead"
    stds = [f"{statistics.stdev(_accs(runs)):.2f} points for the {label}"
            for label, runs in (("GRU-DEQ", deq), ("repeated GRU", rep)) if len(runs) > 1]  # fmt: skip
    spread = f"; the seeds' standard deviation is {' and '.join(stds)}" if stds else ""
    return (f"Measured: {ahead} by {abs(gap):.2f} points (means over {len(deq)} and {len(rep)} seeds; the report, "
            f"one run each: 0.21){spread}.")  # fmt: skip


def repeated_rows(out: Path, quick: bool, progress: bool, command: str, res: Results) -> list[ClaimResult]:
    """Train (or read) the repeated GRU with the GRU-DEQ's schedule and the plan's seeds (as the :data:`SEEDED`
    runs); compare their mean test accuracies, and every model's mean accuracy on the biased test set."""
    preset, overrides = REPEATED_RUN[quick]
    rep = train_seeds(out, "arith-repeated-gru", preset, overrides, (QUICK if quick else FULL).seeds, progress)
    deq = _mean(res["arith-deq"])
    ours = f"repeated GRU {_spread(rep)} % vs GRU-DEQ {_spread(res['arith-deq'])} %"
    holds = abs(_mean(rep) - deq) <= 1.0
    note = f"{JR_NOTE} {repeated_gap_note(rep, res)}"
    row = ClaimResult(REPEATED, ours=ours, holds=holds, command=command, note=note)
    names = ("arith-fc", "arith-gru", "arith-stacked-gru", "arith-deq")
    fc_b, gru_b, stacked_b, deq_b = (_mean(res[n], "test_four_biased") for n in names)
    rep_b = _mean(rep, "test_four_biased")
    spreads = [_spread(runs, "test_four_biased") for runs in (*(res[n] for n in names), rep)]
    biased = ClaimResult(
        BIASED,
        ours="FC {}, GRU {}, stacked GRU {}, GRU-DEQ {}, repeated GRU {} %".format(*spreads),
        holds=deq_b >= rep_b >= stacked_b > gru_b > fc_b,
        command=command,
        note=JR_NOTE,
    )
    return [biased, row]
