"""lab.claims: claims tables with verdicts, sources and commands; mean and spread over seeds."""

from __future__ import annotations

import pytest

from lab.claims import Claim, ClaimResult, Earlier, claims_table, mean_spread, read_earlier, write_claims

CLAIM = Claim("nfe", "JR cuts NFE", paper="30 -> 12", source="paper.txt, Table 1, row 'A|B'", threshold="ratio >= 2")


def test_verdicts_and_table_cells(tmp_path):
    rows = [
        ClaimResult(CLAIM, ours="20 -> 8", holds=True, command="python -m x claims"),
        ClaimResult(CLAIM, ours="20 -> 15", holds=False, command="python -m x claims", note="tried\nthree gammas"),
        ClaimResult(CLAIM, ours="-", holds=None, command="python -m x claims"),
    ]
    assert [r.verdict for r in rows] == ["HOLDS", "DOES NOT HOLD", "NOT MEASURED"]
    table = claims_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + 3
    # a pipe inside a cell is escaped, so every row keeps the header's 8 columns; newlines are folded
    assert all(line.replace("\\|", "").count("|") == 9 for line in lines)
    assert "tried three gammas" in lines[3]
    text = write_claims(tmp_path / "out" / "claims.md", rows, title="demo", preamble="Seeds: 0, 1, 2.")
    assert (tmp_path / "out" / "claims.md").read_text() == text
    assert text.startswith("# demo\n\nSeeds: 0, 1, 2.\n\n")
    assert text.rstrip().endswith("3 claims: 1 HOLDS, 1 DOES NOT HOLD, 1 NOT MEASURED.")
    assert not (tmp_path / "out" / "claims.md.tmp").exists()


def test_a_rebuilt_table_shows_each_earlier_verdict_and_why(tmp_path):
    other = Claim("mem", "DEQ saves memory", paper="1 GB", source="paper.txt, Table 2", threshold="ratio <= 0.2")
    new = Claim("speed", "DEQ is fast enough", paper="2x", source="paper.txt, Table 4", threshold="ratio <= 3")
    old = [ClaimResult(CLAIM, ours="20 -> 15 | x", holds=False, command="c"),
           ClaimResult(other, ours="0.1", holds=True, command="c")]  # fmt: skip
    runs = "| run | a | b | c | d | e | f | g |\n|---|---|---|---|---|---|---|---|\n| x | 1 | 2 | 3 | 4 | 5 | 6 | 7 |"
    write_claims(tmp_path / "before.md", old, title="old", preamble=runs)  # another table before the claims
    reasons = {"nfe": "the solver stops on the batch"}
    earlier = read_earlier(tmp_path / "before.md", ["nfe", "mem"], reasons=reasons)
    assert earlier == {"nfe": Earlier("DOES NOT HOLD", "20 -> 15 \\| x", "the solver stops on the batch"),
                       "mem": Earlier("HOLDS", "0.1", "")}  # fmt: skip
    rows = [ClaimResult(CLAIM, ours="20 -> 8", holds=True, command="c"),
            ClaimResult(other, ours="0.1", holds=True, command="c"),
            ClaimResult(new, ours="2.5x", holds=True, command="c")]  # fmt: skip
    text = write_claims(tmp_path / "after.md", rows, title="new", earlier=earlier)
    lines = text.splitlines()
    assert lines[2].endswith("| note | before |")
    assert "| DOES NOT HOLD -> **HOLDS** |" in lines[4] and "the solver stops on the batch |" in lines[4]
    assert "| HOLDS -> **HOLDS** |" in lines[5] and "nothing that moves it changed |" in lines[5]
    assert "| new -> **HOLDS** |" in lines[6]
    assert text.rstrip().endswith("1 verdict(s) differ from the earlier table's.")
    with pytest.raises(ValueError, match="not in the earlier table: typo"):
        read_earlier(tmp_path / "before.md", ["nfe", "mem"], reasons={"typo": "x"})
    with pytest.raises(ValueError, match="2 rows for 1 claim keys"):
        read_earlier(tmp_path / "before.md", ["nfe"], reasons={})
    (tmp_path / "empty.md").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no claims table"):
        read_earlier(tmp_path / "empty.md", ["nfe"], reasons={})


def test_a_claim_states_everything_before_the_run():
    with pytest.raises(ValueError, match="source"):
        Claim("k", "s", paper="1", source=" ", threshold="t")


def test_mean_spread():
    assert mean_spread([1.0, 2.0, 3.0]) == "2 ± 1 (n=3)"
    assert mean_spread([0.5]) == "0.5"
    assert mean_spread([1.0, float("nan")]) == "[1, nan]"
    assert mean_spread([88.5, 89.25, 88.0], decimals=2, listed=True) == "88.58 ± 0.63 (n=3: 88.50, 89.25, 88.00)"
    assert mean_spread([88.5], decimals=2, listed=True) == "88.50"
    with pytest.raises(ValueError):
        mean_spread([])
