"""Claims tables: a paper's claim, the published number with its source, our measurement and a verdict by a threshold
fixed in code before the run. Standard library only; shared by every task package's claims command
(``python -m lab.X claims``).

A task package declares its claims as :class:`Claim` constants (statement, published number, source, threshold in
words), measures, then builds one :class:`ClaimResult` per claim with the verdict computed by a function of the
measured numbers, and writes them with :func:`write_claims`::

    SPEED = Claim("nfe", "JR cuts inference NFE by >= 2x", paper="30 -> 12 NFE",
                  source="jacobian-regularization-icml2021.txt, Table 1, row 'DEQ-Transformer (JR)'",
                  threshold="NFE(no JR) / NFE(JR) >= 2")
    result = ClaimResult(SPEED, ours=f"{a:.1f} -> {b:.1f} NFE", holds=a / b >= 2, command="python -m ...")
    write_claims(out / "claims.md", [result], title="deq-lm claims")

A table rebuilt after the models or the measurement changed shows each row's earlier verdict beside the new one, with
the reason it may differ (:class:`Earlier`, :func:`read_earlier`)::

    earlier = read_earlier(old / "claims.md", ["nfe"], reasons={"nfe": "the solver now stops on the batch's residual"})
    write_claims(out / "claims.md", results, title="deq-lm claims", earlier=earlier)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from deq_core.train.files import write_text

__all__ = [
    "DOES_NOT_HOLD",
    "HOLDS",
    "NOT_MEASURED",
    "Claim",
    "ClaimResult",
    "Earlier",
    "claims_table",
    "mean_spread",
    "read_earlier",
    "write_claims",
]

HOLDS = "HOLDS"
DOES_NOT_HOLD = "DOES NOT HOLD"
NOT_MEASURED = "NOT MEASURED"


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of a paper, fixed before any run.

    Attributes:
        key: a short identifier (file names, tests).
        statement: the claim in one sentence, as we test it at our scale.
        paper: the published number(s) the claim rests on, e.g. ``"93.6 % -> 93.1 %, 17 -> 6 NFE"``.
        source: where that number is printed: ``"file, table, row"`` in ``shared/papers/``.
        threshold: the test that decides the verdict, in words (the code computing it is the task package's).
    """

    key: str
    statement: str
    paper: str
    source: str
    threshold: str

    def __post_init__(self) -> None:
        for name in ("key", "statement", "paper", "source", "threshold"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"Claim.{name} is empty: every claim states {name} before the run.")


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    """A claim with our measurement.

    Attributes:
        claim: the claim.
        ours: our number(s), formatted for the table.
        holds: the verdict of the claim's threshold on our numbers; None when not measured (e.g. a run missing).
        command: the command that produced ``ours``.
        note: for a claim that does not hold: what was tried and the measured reason; otherwise any caveat.
    """

    claim: Claim
    ours: str
    holds: bool | None
    command: str
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.holds is None:
            return NOT_MEASURED
        return HOLDS if self.holds else DOES_NOT_HOLD


@dataclasses.dataclass(frozen=True)
class Earlier:
    """A claim's row in an earlier table: its verdict and measurement, and why today's may differ.

    Attributes:
        verdict: HOLDS, DOES NOT HOLD or NOT MEASURED, as the earlier table said.
        ours: the earlier measurement, as printed there.
        reason: what changed since (the model, the task, the measurement), or "" when nothing that could move it did.
    """

    verdict: str
    ours: str
    reason: str = ""


_HEADER = ("claim", "threshold", "paper", "source", "ours", "verdict", "command", "note")


def read_earlier(path: str | Path, keys: Sequence[str], reasons: Mapping[str, str]) -> dict[str, Earlier]:
    """The rows of an earlier claims table (a ``claims.md`` written by :func:`write_claims`), keyed by claim key:
    ``keys`` names its rows in order (e.g. the keys of the ``verdicts`` its claims command saved beside it), so a
    claim whose statement was reworded since still finds its row. Each gets ``reasons[key]`` (what changed since; ""
    when absent).

    Raises:
        ValueError: ``path`` holds no claims table, or not one row per key, or ``reasons`` names a key not in ``keys``.
    """
    unknown = sorted(set(reasons) - set(keys))
    if unknown:
        raise ValueError(f"reasons name claims that are not in the earlier table: {', '.join(unknown)}.")
    rows: list[tuple[str, str]] = []
    in_table = False
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if tuple(cells[: len(_HEADER)]) == _HEADER:  # the claims table's header (other tables may precede it)
            in_table = True
        elif in_table and not line.startswith("|"):
            break
        elif in_table and not line.startswith("|---"):
            rows.append((cells[5].strip("*"), cells[4]))
    if not rows:
        raise ValueError(f"{path}: no claims table found (a claims.md written by lab.claims.write_claims).")
    if len(rows) != len(keys):
        raise ValueError(f"{path}: {len(rows)} rows for {len(keys)} claim keys; give one key per row, in order.")
    return {key: Earlier(verdict, ours, reasons.get(key, "")) for key, (verdict, ours) in zip(keys, rows)}


def _cell(text: str) -> str:
    """Table-safe text: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def claims_table(results: Iterable[ClaimResult], earlier: Mapping[str, Earlier] | None = None) -> str:
    """The Markdown claims table: one row per claim (claim, threshold, paper, source, ours, verdict, command, note).
    With ``earlier`` (claim key -> :class:`Earlier`), a last column gives each row's earlier verdict and measurement
    and why they may differ, and the verdict cell reads "EARLIER -> **NOW**" ("new" for a claim the earlier table
    lacked)."""
    header = _HEADER if earlier is None else (*_HEADER, "before")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in results:
        c = r.claim
        verdict = f"**{r.verdict}**"
        cells = [c.statement, c.threshold, c.paper, c.source, r.ours, verdict, f"`{r.command}`", r.note]
        if earlier is not None:
            before = earlier.get(c.key)
            cells[5] = f"{'new' if before is None else before.verdict} -> {verdict}"
            cells.append("" if before is None else f"{before.ours}; {before.reason or 'nothing that moves it changed'}")
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


def write_claims(
    path: str | Path, results: Sequence[ClaimResult], title: str, preamble: str = "",
    earlier: Mapping[str, Earlier] | None = None,
) -> str:  # fmt: skip
    """Write ``# title``, the optional preamble, the claims table (with the ``earlier`` verdicts, see
    :func:`claims_table`) and a one-line count of verdicts to ``path`` (atomically: a temporary file renamed into place,
    :func:`~deq_core.train.files.write_text`). Returns the text written."""
    counts = {v: sum(r.verdict == v for r in results) for v in (HOLDS, DOES_NOT_HOLD, NOT_MEASURED)}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    text = f"# {title}\n\n"
    if preamble.strip():
        text += preamble.strip() + "\n\n"
    text += claims_table(results, earlier) + f"\n{len(results)} claims: {summary}.\n"
    if earlier is not None:
        moved = sum(1 for r in results if r.claim.key in earlier and earlier[r.claim.key].verdict != r.verdict)
        text += f"{moved} verdict(s) differ from the earlier table's.\n"
    write_text(path, text)
    return text


def mean_spread(values: Sequence[float], digits: int = 3, *, decimals: int | None = None, listed: bool = False) -> str:
    """``"mean ± std (n=K)"`` of repeated measurements (e.g. seeds), sample standard deviation; one value alone is
    printed as it is. Non-finite values are kept visible (``nan``), never dropped.

    Args:
        digits: significant digits of every number printed.
        decimals: digits after the point instead (e.g. 2 for accuracies in %); overrides ``digits``.
        listed: also list the values, ``"mean ± std (n=K: a, b, c)"``.

    Raises:
        ValueError: no values.
    """
    if len(values) == 0:
        raise ValueError("mean_spread needs at least one value.")
    spec = f".{digits}g" if decimals is None else f".{decimals}f"
    vals = [float(v) for v in values]
    if len(vals) == 1:
        return format(vals[0], spec)
    if not all(math.isfinite(v) for v in vals):
        return "[" + ", ".join(format(v, spec) for v in vals) + "]"
    count = f"n={len(vals)}" + (": " + ", ".join(format(v, spec) for v in vals) if listed else "")
    return f"{format(statistics.fmean(vals), spec)} ± {format(statistics.stdev(vals), spec)} ({count})"
