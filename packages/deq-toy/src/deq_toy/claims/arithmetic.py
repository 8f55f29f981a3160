"""Claim 2: the student report's nested-arithmetic results (its Figures 8, 10, 11 tables), at the report's data
sizes with a compute-equivalent large-batch schedule."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deq_core.train.claims import Claim, ClaimResult
from deq_core.train.metrics import read_metrics

from ..runs import ensure_run

REPORT = "depth-properties-of-deqs-student-report.txt"
MIN_DEQ_ACC = 85.0  # % test accuracy the GRU-DEQ must reach
BATCH_GAP = 1.5  # points: the large-batch GRU must be within this of the batch-64 GRU
PLATEAU_GAIN = 1.0  # points of validation accuracy gained over the last quarter of the epochs, at most

ORDERING = Claim(
    key="ordering",
    statement="On the 4-operation set the GRU-DEQ is at least as accurate as the 3-layer GRU, which beats the GRU, "
    "which beats the FC network.",
    paper="test acc FC 64.58 %, GRU 80.73 %, stacked GRU 85.0 %, DEQ 87.62 %",
    source=f"{REPORT}, Figure 10 table (Models Metrics on Test Data), rows FC NN, One-layer GRU, Stacked GRU, DEQ",
    threshold="test acc GRU-DEQ >= stacked GRU > GRU > FC (one seed each)",
)
DEQ_ACC = Claim(
    key="deq-accuracy",
    statement="The GRU-DEQ reaches at least 85 % test accuracy on the 4-operation set.",
    paper="87.62 %",
    source=f"{REPORT}, Figure 10 table, row DEQ",
    threshold=f"GRU-DEQ test acc >= {MIN_DEQ_ACC:g} %",
)
CONVERGED = Claim(
    key="deq-converges",
    statement="At the end of training the GRU-DEQ's forward solve reaches its tolerance (the report's never did).",
    paper="the report's ||z - f(z)|| never reached a fixed point (Figure 12, no number printed)",
    source=f"{REPORT}, section 5, Figure 12",
    threshold="test set: mean relative residual < the solver tolerance (1e-3) and >= 99 % of samples converged",
)
BATCH = Claim(
    key="batch-schedule",
    statement="The large-batch schedule used for these runs reaches the accuracy of the report's batch 64 (on the "
    "GRU, at equal epochs).",
    paper="batch 64, 40 epochs; 'accuracies began to plateau around epoch 40'",
    source=f"{REPORT}, section 5, first paragraph",
    threshold=f"abs(GRU test acc, batch 512 - batch 64) <= {BATCH_GAP:g} points",
)
PLATEAU = Claim(
    key="plateau",
    statement="Every model was trained to a plateau, as the report's were.",
    paper="'the models' accuracies began to plateau around epoch 40'",
    source=f"{REPORT}, section 5, first paragraph",
    threshold=f"each run's valid acc gains <= {PLATEAU_GAIN:g} point over its last quarter of epochs (at least "
    "its last 2 epochs)",
)
BIASED = Claim(
    key="biased",
    statement="Trained on the 4-operation set and tested on its biased version (3x more '-'), the ordering is "
    "DEQ >= repeated GRU >= stacked GRU > GRU > FC.",
    paper="FC 62.13 %, GRU 75.00 %, stacked GRU 82.50 %, DEQ 85.9 %, repeated GRU 84.9 %",
    source=f"{REPORT}, Figure 11 table (test and biased data) and the paragraph after it",
    threshold="biased test acc DEQ >= repeated GRU >= stacked GRU > GRU > FC (the models of the rows above)",
)
TWO_OPS = Claim(
    key="two-ops",
    statement="On the 2-operation sets the GRU-DEQ is at least as accurate as the GRU (96.3 vs 96.0 %, biased "
    "94.7 vs 94.2 %).",
    paper="GRU 96.0 % (biased 94.2 %), DEQ 96.3 % (biased 94.7 %)",
    source=f"{REPORT}, Figure 8 table",
    threshold="test acc DEQ >= GRU on both 2-operation sets",
)
REPEATED = Claim(
    key="repeated",
    statement="The 50x repeated GRU comes close to the GRU-DEQ (87.41 vs 87.62 %).",
    paper="87.41 % vs 87.62 %",
    source=f"{REPORT}, Figure 10 table, rows Repeated GRU and DEQ",
    threshold="abs(repeated GRU - GRU-DEQ) <= 1 point, both trained with the same schedule",
)


MEASURED = (ORDERING, DEQ_ACC, CONVERGED, BATCH, PLATEAU)


@dataclass(frozen=True)
class ArithmeticPlan:
    """The runs of the claim: run name -> (preset, overrides)."""

    runs: dict[str, tuple[str, tuple[str, ...]]]


_LARGE = ("hidden=50", "batch_size=512", "lr=2.8e-3")
FULL = ArithmeticPlan(
    runs={
        "arith-fc": ("arith-fc", (*_LARGE, "epochs=40")),
        "arith-gru": ("arith-gru", (*_LARGE, "epochs=40")),
        "arith-stacked-gru": ("arith-stacked-gru", (*_LARGE, "epochs=20")),
        "arith-deq": ("arith-deq", (*_LARGE, "epochs=3")),
        "arith-gru-batch64": ("arith-gru", ("hidden=50", "epochs=40")),
    }
)
_TINY = ("n_train=256", "n_valid=64", "n_test=64", "hidden=8", "batch_size=64", "epochs=4", "log_every=2")
QUICK = ArithmeticPlan(
    runs={
        "arith-fc": ("arith-fc-tiny", (*_TINY,)),
        "arith-gru": ("arith-gru-tiny", (*_TINY,)),
        "arith-stacked-gru": ("arith-stacked-gru-tiny", (*_TINY,)),
        "arith-deq": ("arith-deq-tiny", (*_TINY,)),
        "arith-gru-batch64": ("arith-gru-tiny", (*_TINY, "batch_size=16", "lr=5e-4")),
    }
)


def _plateau_gain(run_dir: Path) -> float:
    """Validation accuracy of the last evaluation minus that of the evaluation PLATEAU_EVALS evaluations earlier,
    where PLATEAU_EVALS is a quarter of the evaluations but at least 2 (one evaluation per epoch: the last quarter
    of the epochs, at least the last 2 epochs)."""
    valid = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("split") == "valid"]
    back = max(len(valid) // 4, 2)
    return valid[-1]["acc"] - valid[max(len(valid) - 1 - back, 0)]["acc"]


def _acc(res: dict[str, Any]) -> float:
    return float(res["test_four"]["acc"])


def valid_acc_at(run_dir: Path, step: int) -> float:
    """Validation accuracy of the last evaluation at or before ``step`` (the first one when none is)."""
    valid = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("split") == "valid"]
    return float(([r for r in valid if r["step"] <= step] or valid[:1])[-1]["acc"])


def budget_note(out: Path) -> str:
    """The four models' validation accuracy when the GRU-DEQ's run ended (same batch and lr, the others' cosine
    schedules longer), and the GRU-DEQ's forward / backward NFE per training batch at the end."""
    arith = out / "arithmetic"
    train = [r for r in read_metrics(arith / "arith-deq" / "metrics.jsonl") if r.get("split") == "train"]
    end = int(train[-1]["step"])
    accs = ", ".join(
        f"{label} {valid_acc_at(arith / name, end):.1f}"
        for label, name in (("FC", "arith-fc"), ("GRU", "arith-gru"), ("stacked", "arith-stacked-gru"))
    )
    return (
        f"Valid acc at step {end}, where the GRU-DEQ's run ended: {accs}, GRU-DEQ "
        f"{valid_acc_at(arith / 'arith-deq', end):.1f} %. The GRU-DEQ's training batches ended at "
        f"{train[-1]['nfe_forward']:.0f} forward / {train[-1].get('nfe_backward', float('nan')):.0f} backward NFE "
        "(limit 50), which is why it got fewer epochs."
    )


def residual_note(out: Path) -> str:
    """How the GRU-DEQ's training residual and forward NFE moved from the first to the last logged window."""
    train = [r for r in read_metrics(out / "arithmetic" / "arith-deq" / "metrics.jsonl") if r.get("split") == "train"]
    first, last = train[0], train[-1]
    return (
        f"Training batches: mean relative residual {first['residual']:.2e} -> {last['residual']:.2e}, forward NFE "
        f"{first['nfe_forward']:.0f} -> {last['nfe_forward']:.0f} (limit 50), converged fraction "
        f"{first['converged']:.3f} -> {last['converged']:.3f}, between steps {first['step']} and {last['step']}: the "
        "GRU-DEQ drifts to the edge of convergence as training goes on, as the report's did (its Figure 12)."
    )


def measured_rows(res: dict[str, dict[str, Any]], gains: dict[str, float], command: str) -> list[ClaimResult]:
    """The rows of the claims measured by the plan's runs (results.json of each run, plateau gains)."""
    fc, gru, stacked, deq = (_acc(res[k]) for k in ("arith-fc", "arith-gru", "arith-stacked-gru", "arith-deq"))
    accs = f"FC {fc:.2f}, GRU {gru:.2f}, stacked GRU {stacked:.2f}, GRU-DEQ {deq:.2f} %"
    deq_test = res["arith-deq"]["test_four"]
    tol = 1e-3
    residual, converged = float(deq_test["residual"]), float(deq_test["converged"])
    gru64 = _acc(res["arith-gru-batch64"])
    plateau = all(g <= PLATEAU_GAIN for g in gains.values())
    gain_text = ", ".join(f"{k} {v:+.2f}" for k, v in gains.items())
    return [
        ClaimResult(ORDERING, ours=accs, holds=deq >= stacked > gru > fc, command=command),
        ClaimResult(DEQ_ACC, ours=f"{deq:.2f} %", holds=deq >= MIN_DEQ_ACC, command=command),
        ClaimResult(
            CONVERGED,
            ours=f"mean rel. residual {residual:.2e}, {100 * converged:.1f} % converged, "
            f"{deq_test['nfe_forward']:.1f} NFE",
            holds=residual < tol and converged >= 0.99,
            command=command,
        ),
        ClaimResult(
            BATCH,
            ours=f"GRU, 40 epochs: batch 512 {gru:.2f} %, batch 64 {gru64:.2f} %",
            holds=abs(gru - gru64) <= BATCH_GAP,
            command=command,
        ),
        ClaimResult(PLATEAU, ours=f"valid acc gain (points): {gain_text}", holds=plateau, command=command),
    ]


def not_measured_rows(claims: Sequence[Claim], command: str, note: str) -> list[ClaimResult]:
    """NOT MEASURED rows for ``claims``, each with the command that would measure it."""
    return [ClaimResult(c, ours="not run", holds=None, command=command, note=note) for c in claims]


_SCHEDULE = "hidden=50 batch_size=512 lr=2.8e-3 epochs=40"
_REPRODUCE = "python -m deq_toy.reproduce arithmetic --output-dir OUT"
LATER = {
    TWO_OPS: f"{_REPRODUCE} --variants two,two_biased --runs arith-gru,arith-deq {_SCHEDULE}",
}
REPEATED_COMMAND = "python -m deq_toy.reproduce claims --output-dir OUT --claims synthetic,arithmetic,repeated"
REPEATED_RUN = {
    False: ("arith-repeated-gru", (*_LARGE, "epochs=3")),
    True: ("arith-repeated-gru-tiny", _TINY),
}  # quick -> (preset, overrides); the GRU-DEQ's schedule


def repeated_rows(
    out: Path, quick: bool, progress: bool, command: str, res: dict[str, dict[str, Any]]
) -> list[ClaimResult]:
    """Train (or read) the repeated GRU with the GRU-DEQ's schedule; compare their test accuracies, and every
    model's accuracy on the biased test set."""
    preset, overrides = REPEATED_RUN[quick]
    rep = ensure_run(out / "arithmetic" / "arith-repeated-gru", preset, overrides, out / "data", progress)
    deq = _acc(res["arith-deq"])
    ours = f"repeated GRU {_acc(rep):.2f} % vs GRU-DEQ {deq:.2f} %"
    row = ClaimResult(REPEATED, ours=ours, holds=abs(_acc(rep) - deq) <= 1.0, command=command)
    names = ("arith-deq", "arith-stacked-gru", "arith-gru", "arith-fc")
    deq_b, stacked_b, gru_b, fc_b = (float(res[n]["test_four_biased"]["acc"]) for n in names)
    rep_b = float(rep["test_four_biased"]["acc"])
    biased = ClaimResult(
        BIASED,
        ours=f"FC {fc_b:.2f}, GRU {gru_b:.2f}, stacked GRU {stacked_b:.2f}, GRU-DEQ {deq_b:.2f}, repeated GRU "
        f"{rep_b:.2f} % (GRU-DEQ and repeated GRU: 3 epochs)",
        holds=deq_b >= rep_b >= stacked_b > gru_b > fc_b,
        command=command,
    )
    if not biased.holds:
        biased = dataclasses.replace(biased, note=budget_note(out))
    return [biased, row]


def arithmetic_claims(out: Path, quick: bool, progress: bool, command: str, repeated: bool) -> list[ClaimResult]:
    """Train (or read) the plan's runs under OUT/arithmetic (data in OUT/data) and, with ``repeated``, the repeated
    GRU; return the claim rows (the two-operation one NOT MEASURED, with its command)."""
    plan = QUICK if quick else FULL
    res, gains = {}, {}
    for name, (preset, overrides) in plan.runs.items():
        run_dir = out / "arithmetic" / name
        res[name] = ensure_run(run_dir, preset, overrides, out / "data", progress)
        gains[name] = _plateau_gain(run_dir)
    rows = measured_rows(res, gains, command)
    notes = {"ordering": budget_note(out), "deq-accuracy": budget_note(out), "deq-converges": residual_note(out)}
    notes["plateau"] = "The runs that gain more were cut short by the CPU budget; " + notes["ordering"]
    rows = [dataclasses.replace(r, note=notes.get(r.claim.key, "")) if r.holds is False else r for r in rows]
    rows += [
        ClaimResult(claim, ours="not run", holds=None, command=cmd, note="not run within this session's CPU budget")
        for claim, cmd in LATER.items()
    ]
    if repeated:
        return [*rows, *repeated_rows(out, quick, progress, command, res)]
    return [*rows, *not_measured_rows((BIASED, REPEATED), REPEATED_COMMAND, "not run within this session's CPU budget")]
