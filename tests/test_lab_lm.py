"""``python -m lab.lm``: the claims presets (equal non-embedding parameters, same tokens), the verdict
thresholds on made-up measurements, the printed training commands, resuming an interrupted run, and the whole
``claims --quick`` pipeline on a corpus the test writes."""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shlex
from pathlib import Path

import pytest
import torch

from conftest import run_module
from deq_core.train.metrics import read_metrics
from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import ResumeConfigError, replace_config
from deq_lm.configs import get_config
from deq_lm.models import build_model
from deq_lm.train import train
from lab.claims import DOES_NOT_HOLD, HOLDS, NOT_MEASURED
from lab.lm import claims as lc
from lab.lm import copy400, reproduce
from lab.lm.step_timing import expected_seconds

ROOT = Path(__file__).resolve().parents[1]  # the repository's root, which holds lab/
WORDS = "the a cat dog sat ran on under mat log saw big small red blue and then it".split()


def write_corpus(folder: Path) -> Path:
    """A few thousand words of seeded random sentences in train/valid/test.txt."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for split, n_lines in (("train", 240), ("valid", 30), ("test", 30)):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(n_lines)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def body_parameters(preset: str, quick: bool = False) -> int:
    cfg = reproduce.run_config(preset, 0, Path("unused"), quick)
    with torch.device("meta"):
        return sum(p.numel() for p in build_model(cfg, 10_000).body.parameters())


CLAIMS_BUDGET = (reproduce.DEQ, reproduce.TXL, reproduce.TIED, *reproduce.JR)
PLATEAU = (reproduce.PLATEAU_DEQ, reproduce.PLATEAU_TXL, reproduce.PLATEAU_TIED)
TRELLIS = (reproduce.TRELLIS_DEQ, reproduce.TRELLIS_TWIN)


def tokens_of(preset: str, quick: bool) -> tuple[int, int, int]:
    cfg = reproduce.run_config(preset, 0, Path("unused"), quick)
    return cfg.optim.steps, cfg.optim.batch_size, cfg.data.tgt_len


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("group", [CLAIMS_BUDGET, PLATEAU])
def test_presets_have_equal_non_embedding_parameters_and_tokens(quick, group):
    deq, txl, tied = (body_parameters(p, quick) for p in group[:3])
    assert abs(deq - txl) <= lc.PARAM_TOLERANCE * txl
    assert tied == deq
    assert len({tokens_of(p, quick) for p in group}) == 1
    full = get_config(group[0])
    tokens = full.optim.steps * full.optim.batch_size * full.data.tgt_len
    assert tokens >= 2 * 1_000_000  # >= 2 passes over a >= 1M-token corpus
    assert len(reproduce.JR) >= 4
    assert set(CLAIMS_BUDGET + PLATEAU + TRELLIS) == set(reproduce.PRESETS)


@pytest.mark.parametrize("quick", [False, True])
def test_trellis_presets_are_one_cell_solved_and_unrolled_on_the_same_tokens(quick):
    deq, twin = (reproduce.run_config(p, 0, Path("unused"), quick) for p in TRELLIS)
    assert (deq.model.name, twin.model.name) == ("deq_trellisnet", "trellisnet")
    assert body_parameters(TRELLIS[0], quick) == body_parameters(TRELLIS[1], quick)
    assert tokens_of(TRELLIS[0], quick) == tokens_of(TRELLIS[1], quick)
    assert twin.model.n_layers >= deq.deq.max_iter  # never fewer cell applications than the DEQ's training solve
    full = get_config(TRELLIS[1])
    assert full.optim.steps * full.optim.batch_size * full.data.tgt_len >= 2 * 1_000_000
    assert full.optim.steps > lc.PLATEAU_WINDOW and full.run.eval_every * 2 <= lc.PLATEAU_WINDOW


def test_plateau_runs_train_longer_than_the_claims_budget_on_the_same_batches():
    steps, batch, length = tokens_of(reproduce.PLATEAU_DEQ, False)
    base_steps, base_batch, base_length = tokens_of(reproduce.DEQ, False)
    assert (batch, length) == (base_batch, base_length) and steps >= 3 * base_steps
    assert steps > lc.PLATEAU_WINDOW and get_config(reproduce.PLATEAU_DEQ).run.eval_every * 2 <= lc.PLATEAU_WINDOW


def measured(label: str, ppl: float, nfe: float, params: int = 100, saved: int = 100) -> lc.Measured:
    return lc.Measured(label, (ppl,), (nfe,), params, saved)


def test_claim4_thresholds():
    deq = measured("deq", 20.9, 15, params=100, saved=25)
    holds = lc.twin_results(deq, measured("txl", 20.0, 0, params=105, saved=100), lc.PPL_VS_TXL, lc.MEMORY_VS_TXL, "c")
    assert [r.verdict for r in holds] == [HOLDS, HOLDS]
    worse = lc.twin_results(measured("deq", 21.1, 15, saved=26), measured("txl", 20.0, 0), lc.PPL_VS_TXL,
                            lc.MEMORY_VS_TXL, "c")  # fmt: skip
    assert [r.verdict for r in worse] == [DOES_NOT_HOLD, DOES_NOT_HOLD]
    unequal = lc.twin_results(deq, measured("txl", 30.0, 0, params=120), lc.PPL_VS_TXL, lc.MEMORY_VS_TXL, "c")
    assert unequal[0].verdict == DOES_NOT_HOLD and "parameter counts differ" in unequal[0].note


def test_claim4_rows_that_fail_say_what_was_measured():
    deq = lc.Measured("deq", (22.0,), (15.0,), 100, 30 * 2**20, layers=1, valid_ppl=(40.0, 30.0, 24.0))
    twin = lc.Measured("txl", (20.0,), (0.0,), 100, 40 * 2**20, layers=4, valid_ppl=(32.0, 25.0, 20.0))
    ppl_row, mem_row = lc.twin_results(deq, twin, lc.PPL_VS_TXL, lc.MEMORY_VS_TXL, "c")
    assert ppl_row.verdict == mem_row.verdict == DOES_NOT_HOLD
    assert "1.250x / 1.200x / 1.200x (narrowing" in ppl_row.note
    flat = lc.twin_results(dataclasses.replace(deq, valid_ppl=(30.0, 30.0)), dataclasses.replace(twin, valid_ppl=(
        25.0, 25.0)), lc.PPL_VS_TXL, lc.MEMORY_VS_TXL, "c")[0]  # fmt: skip
    assert "1.200x / 1.200x (not narrowing" in flat.note
    # 10 MiB per twin layer; 30 MiB <= 25 % of the twin's needs >= 12 such layers
    assert "10.0 MiB per layer" in mem_row.note and ">= 12 such layers" in mem_row.note
    held = lc.twin_results(deq, dataclasses.replace(twin, ppl=(21.5,), saved_bytes=130 * 2**20), lc.PPL_VS_TXL,
                           lc.MEMORY_VS_TXL, "c")  # fmt: skip
    assert [r.verdict for r in held] == [HOLDS, HOLDS] and held[0].note == held[1].note == ""
    # the weight-tied twin as the ablation: as far from the twin as the DEQ -> the architecture; close -> the solve
    tied = lc.Measured("tied", (22.5,), (0.0,), 100, 240 * 2**20, layers=8)
    row = lc.twin_results(deq, twin, lc.PPL_VS_TXL, lc.MEMORY_VS_TXL, "c", tied=tied)[0]
    assert "unrolled 8 times" in row.note and "1.125x the twin" in row.note and "not with the solve" in row.note
    close = dataclasses.replace(tied, ppl=(20.5,))
    row = lc.twin_results(deq, twin, lc.PPL_VS_TXL, lc.MEMORY_VS_TXL, "c", tied=close)[0]
    assert "1.025x the twin, within the margin: the gap lies in the solve" in row.note
    assert "cause not isolated" in lc.twin_results(deq, twin, lc.PPL_VS_TXL, lc.MEMORY_VS_TXL, "c")[0].note


def test_trellis_memory_row_uses_its_own_fraction():
    deq, twin = measured("deq", 20.0, 15, saved=21), measured("unrolled", 20.0, 0, saved=100)
    row = lc.memory_row(deq, twin, lc.MEMORY_VS_UNROLLED_TRELLIS, "c", limit=lc.TRELLIS_MEMORY_FRACTION)
    assert row.verdict == DOES_NOT_HOLD  # 21 % > 20 %, though within claim 4's 25 %
    assert lc.memory_row(deq, twin, lc.MEMORY_VS_TXL, "c").verdict == HOLDS
    smaller = lc.memory_row(dataclasses.replace(deq, saved_bytes=20), twin, lc.MEMORY_VS_UNROLLED_TRELLIS, "c",
                            limit=lc.TRELLIS_MEMORY_FRACTION)  # fmt: skip
    assert smaller.verdict == HOLDS


def body_count(cfg) -> int:
    return reproduce.body_parameters(cfg, 10_000)


@pytest.mark.parametrize("quick", [False, True])
def test_the_runtime_deq_is_widened_to_the_deep_networks_parameters_within_one_ffn_column(quick):
    deq, deep = reproduce.runtime_configs(reproduce.RUNTIME_PAIRS[0], 0, Path("unused"), quick, 10_000)
    column = body_count(replace_config(deq, {"model.d_ff": deq.model.d_ff + 1})) - body_count(deq)
    assert column > 0 and abs(body_count(deq) - body_count(deep)) <= column / 2
    run = reproduce.run_config(reproduce.DEQ, 0, Path("unused"), quick)
    assert deq.model.d_ff > run.model.d_ff  # 18 layers hold more parameters than the run's 4-layer twin
    assert replace_config(deq, {"model.d_ff": run.model.d_ff}) == run  # only the FFN changed, solver included
    # any count a width reaches gives that width back; a count below one column's model cannot be reached
    assert reproduce.matched_ffn(run, body_count(replace_config(run, {"model.d_ff": 777})), 10_000) == 777
    with pytest.raises(ValueError, match="cannot reach 10 non-embedding parameters"):
        reproduce.matched_ffn(run, 10, 10_000)


def test_runtime_pairs_are_the_papers_18_layer_transformer_and_70_layer_trellisnet():
    transformer, trellis = reproduce.RUNTIME_PAIRS
    _, deep = reproduce.runtime_configs(transformer, 0, Path("unused"), False, 10_000)
    twin = reproduce.run_config(reproduce.TXL, 0, Path("unused"), False)
    assert deep.model.n_layers == 18 and twin.model.n_layers == 4
    assert replace_config(deep, {"model.n_layers": 4}) == twin  # the 4-layer twin's widths, 18 layers deep
    deq, deep = reproduce.runtime_configs(trellis, 0, Path("unused"), False, 10_000)
    assert deep.model.n_layers == 70 and deq == reproduce.run_config(reproduce.TRELLIS_DEQ, 0, Path("unused"), False)
    assert body_count(deq) == body_count(deep)  # one cell, tied across depth
    assert "step(18-layer Transformer-XL)" in lc.RUNTIME_TXL_TRAIN.threshold
    assert "unrolled 70 times" in lc.RUNTIME_TRELLIS_INFERENCE.statement


def test_runtime_rows_compare_each_step_ratio_with_its_pair_threshold():
    def runtime(train: float, inference: float) -> lc.Runtime:  # ratios of CPU seconds to a 0.1 s twin step
        return lc.Runtime("deq", "twin", lc.StepTime(0.1 * train, 1.0, 0.1, 1.0),
                          lc.StepTime(0.1 * inference, 1.0, 0.1, 1.0), (20, 7, 30), 4, 1_000, 1_000)  # fmt: skip

    txl = (lc.RUNTIME_TXL_TRAIN, lc.RUNTIME_TXL_INFERENCE)
    trellis = (lc.RUNTIME_TRELLIS_TRAIN, lc.RUNTIME_TRELLIS_INFERENCE)
    assert [r.verdict for r in lc.runtime_rows(runtime(2.8, 2.0), txl, "c")] == [HOLDS, HOLDS]
    assert [r.verdict for r in lc.runtime_rows(runtime(2.8, 2.0), trellis, "c")] == [DOES_NOT_HOLD, HOLDS]
    assert [r.verdict for r in lc.runtime_rows(runtime(2.4, 2.1), trellis, "c", "n")] == [HOLDS, DOES_NOT_HOLD]
    train, inference = lc.runtime_rows(runtime(2.4, 2.1), trellis, "c", "n")
    assert "inference step: deq 210.0 ms vs twin 100.0 ms CPU (2.10x; wall 1.00x)" in inference.ours
    assert train.note == "n" and inference.note.endswith(" n")  # a row that fails says what was measured
    assert "applies its cell 30 times (30 iterations) against the deep network's 4 layers (7.5x" in inference.note
    assert "7.0 ms, against 25.0 ms per deep layer and 100.0 ms for the deep network's whole step" in inference.note
    failed = lc.runtime_rows(runtime(2.9, 1.0), txl, "c")[0]
    assert "applies its cell 28 times (20 forward iterations without a graph" in failed.note
    assert lc.RUNTIME_TXL_TRAIN.paper.startswith("2.82x") and lc.RUNTIME_TRELLIS_INFERENCE.paper.startswith("1.64x")


def test_claim5_thresholds_pick_the_best_qualifying_setting():
    deq = measured("deq", 20.0, 24)
    settings = [measured("a", 20.5, 13), measured("b", 20.9, 10), measured("c", 25.0, 5)]
    assert lc.best_jr(deq, settings) == (settings[1], True)
    times = {"deq": lc.StepTime(1.0, 2.0, 0.5, 1.0), "b": lc.StepTime(0.8, 1.5, 0.5, 1.0)}  # 2.0x vs 1.6x the twin
    rows = lc.jr_results(deq, settings, times, "c")
    assert [r.verdict for r in rows] == [HOLDS, HOLDS]
    # steps are compared relative to the twin's step timed with each: a run timed on a slower machine still compares
    other_machine = lc.StepTime(1.1, 2.2, 0.6, 1.2)  # 1.83x the twin
    assert [r.verdict for r in lc.jr_results(deq, settings, {**times, "b": other_machine}, "c")] == [HOLDS, HOLDS]
    slower = lc.jr_results(deq, settings, {**times, "b": lc.StepTime(0.9, 1.0, 0.4, 0.4)}, "c")  # 2.25x the twin
    assert [r.verdict for r in slower] == [HOLDS, DOES_NOT_HOLD]
    unrecorded = lc.jr_results(deq, settings, {"deq": times["deq"]}, "c")
    assert [r.verdict for r in unrecorded] == [HOLDS, NOT_MEASURED] and "no step record of b" in unrecorded[1].note
    none = [measured("a", 20.5, 13), measured("c", 25.0, 5)]
    assert lc.best_jr(deq, none) == (none[0], False)
    rows = lc.jr_results(deq, none, {"deq": times["deq"], "a": lc.StepTime(0.5, 0.5, 0.5, 0.5)}, "c")
    assert [r.verdict for r in rows] == [DOES_NOT_HOLD, DOES_NOT_HOLD] and rows[0].note == ""
    # with the unregularized DEQ's inference sweep, a failed row compares each setting with it at no more NFE
    sweep = {4: 30.0, 8: 21.0, 12: 20.2, 24: 20.0}
    rows = lc.jr_results(deq, none, {"deq": times["deq"]}, "c", early_stop=sweep)
    assert "test ppl 30 / 21 / 20.2 / 20 at limits 4 / 8 / 12 / 24" in rows[0].note
    assert "a 20.5 at 13.0 NFE vs 20.2 at limit 12; c 25 at 5.0 NFE vs 30 at limit 4" in rows[0].note
    assert lc.jr_results(deq, settings, times, "c", early_stop=sweep)[0].note == ""  # a row that holds: no reason
    assert expected_seconds(2.0, 1.0, 0.25) == pytest.approx(1.25)


@pytest.mark.parametrize("quick", [False, True])
def test_printed_command_builds_the_same_config(quick, tmp_path):
    for preset in reproduce.PRESETS:
        words = shlex.split(reproduce.train_command(tmp_path, preset, 1, tmp_path / "corpus", quick))
        assert words[:4] == ["OMP_NUM_THREADS=1", "python", "-m", "deq_lm.train"]
        overrides = [w for w in words if "=" in w and not w.startswith("OMP")]
        cfg = apply_overrides(get_config(words[words.index("--config") + 1]), overrides)
        cfg = replace_config(cfg, {"data.data_dir": words[words.index("--data-dir") + 1]})
        assert cfg == reproduce.run_config(preset, 1, tmp_path / "corpus", quick)
        assert words[words.index("--output-dir") + 1] == str(reproduce.run_dir(tmp_path, preset, 1))


def test_interrupted_run_is_resumed_and_a_finished_one_read(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    cfg = reproduce.run_config(reproduce.TXL, 0, corpus, quick=True)
    folder = tmp_path / "run"
    train(replace_config(cfg, {"run.stop_after": 12}), folder, name="interrupted")
    assert not reproduce.finished(folder, cfg)
    with pytest.raises(RuntimeError, match="stopped before step 24"):
        reproduce.ensure_run(replace_config(cfg, {"run.stop_after": 18}), folder, "interrupted again")
    reproduce.ensure_run(cfg, folder, "resumed")
    records = read_metrics(folder / "metrics.jsonl")
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    assert train_steps == sorted(set(train_steps)) and train_steps[-1] == cfg.optim.steps
    assert [r["step"] for r in records if r["split"] == "test"] == [cfg.optim.steps]
    before = (folder / "metrics.jsonl").read_text()
    reproduce.ensure_run(cfg, folder, "read")
    assert (folder / "metrics.jsonl").read_text() == before
    with pytest.raises(ResumeConfigError, match="model.n_layers"):  # a finished run of another config is not read
        reproduce.ensure_run(replace_config(cfg, {"model.n_layers": 3}), folder, "other")


def test_commands_resume_an_interrupted_run_and_the_table_prints_fresh_commands(tmp_path, capsys):
    corpus, out = write_corpus(tmp_path / "corpus"), tmp_path / "out"
    cfg = reproduce.run_config(reproduce.TXL, 0, corpus, quick=True)
    train(replace_config(cfg, {"run.stop_after": 12}), reproduce.run_dir(out, reproduce.TXL, 0), name="interrupted")
    capsys.readouterr()
    assert reproduce.main(["commands", "--quick", "--output-dir", str(out), "--data-dir", str(corpus)]) == 0
    lines = capsys.readouterr().out.splitlines()
    resumed = [line for line in lines if "--resume" in line]
    assert len(lines) == len(reproduce.PRESETS) + len(lc.SPREAD_SEEDS) - 1 + len(copy400.runs(quick=True))
    assert len(resumed) == 1 and f"{reproduce.TXL}-seed0 " in resumed[0]
    # the claims table documents the runs for any machine: no --resume, whatever this one holds
    args = argparse.Namespace(seeds=[0], output_dir=out, quick=True)
    listed = [line for line in reproduce.preamble(args, corpus, "").splitlines() if line.startswith("- `")]
    assert len(listed) == len(lines) and not any("--resume" in line for line in listed)


def test_quick_claims_pipeline(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    assert reproduce.main(["claims", "--quick", "--output-dir", str(out), "--data-dir", str(corpus)]) == 0
    text = (out / "claims.md").read_text()
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("| claim | threshold")))
    rows = [line for line in lines[start + 2 :] if line.startswith("| ")]
    tables = [line for line in lines[:start] if line.startswith("| ") and "---" not in line]
    copy_header = next(i for i, line in enumerate(tables) if line.startswith("| model | params"))
    runs, copy_runs = tables[1:copy_header], tables[copy_header + 1 :]
    assert [row.split(" | ")[0].strip("| ") for row in runs] == [p.removeprefix("pdocs-") for p in reproduce.PRESETS]
    assert [row.split(" | ")[0].strip("| ") for row in copy_runs] == list(copy400.RUN_MODELS)
    assert len(rows) == len(lc.CLAIMS) + len(copy400.CLAIMS)
    for claim, row in zip(copy400.CLAIMS, rows[len(lc.CLAIMS) :]):
        assert claim.statement in row and "Table 1" in row
        assert f"**{HOLDS}**" in row or f"**{DOES_NOT_HOLD}**" in row
    assert (out / "copy400_loss.png").stat().st_size > 0
    rows = rows[: len(lc.CLAIMS)]
    plateau_claims = (lc.PPL_VS_TXL_PLATEAU, lc.PPL_VS_TIED_PLATEAU)
    for claim, row in zip(lc.CLAIMS, rows):
        assert claim.statement in row and claim.source.split(",")[0] in row
        if claim in plateau_claims:  # 24 steps: the 2,000-step window starts at the first evaluation
            assert "at a plateau (valid ppl fall over the last 2,000 steps: plateau32-deq-transformer " in row
        elif claim == lc.PPL_VS_UNROLLED_TRELLIS:
            assert "at a plateau (valid ppl fall over the last 2,000 steps: trellis-deq-trellisnet " in row
        else:
            assert f"**{HOLDS}**" in row or f"**{DOES_NOT_HOLD}**" in row
        assert "python -m lab.lm claims --quick" in row
    # every row shows the earlier table's verdict and measurement, and what changed since
    earlier = reproduce.read_earlier(reproduce.EARLIER_TABLE, reproduce.earlier_keys(), lc.EARLIER_REASONS)
    assert set(earlier) == {c.key for c in (*lc.CLAIMS, *copy400.CLAIMS)}
    for claim, row in zip(lc.CLAIMS, rows):
        before = earlier[claim.key]
        assert f"| {before.verdict} -> **" in row and row.endswith(f"{before.reason} |"), row
    assert (out / "ppl_vs_nfe.png").stat().st_size > 0
    dump = json.loads((out / "claims.json").read_text())
    assert set(dump["measured"]) == set(reproduce.PRESETS)
    assert set(dump["copy400"]) == set(copy400.RUN_MODELS)
    assert all(len(m["loss"]) == len(copy400.seeds(k)) and m["loss"][0] > 0 for k, m in dump["copy400"].items())
    deq = dump["measured"][reproduce.DEQ]
    assert deq["nfe"][0] > 0 and deq["ppl"][0] > 1 and dump["measured"][reproduce.TXL]["nfe"] == [0.0]
    assert all(t["cpu"] > 0 for t in dump["step_times"].values())
    assert all(t["reference_cpu"] > 0 for t in dump["step_times"].values())
    spread = dump["seed_spread"]
    assert spread["seeds"] == list(lc.SPREAD_SEEDS) and len(spread["test_ppl"]) == len(lc.SPREAD_SEEDS)
    assert spread["test_ppl"][0] == dump["measured"][reproduce.TXL]["ppl"][0]  # seed 0 is the claims' own run
    # Table 4: each pair timed on fresh models, the DEQ held to the iterations its run logged
    assert set(dump["runtimes"]) == {"deq-transformer", "deq-trellisnet"}
    pairs = ((reproduce.DEQ, "deq-transformer", 18), (reproduce.TRELLIS_DEQ, "deq-trellisnet", 70))
    for preset, label, layers in pairs:
        rt = dump["runtimes"][label]
        assert rt["nfe"] == list(reproduce.logged_iterations(reproduce.run_dir(out, preset, 0)))
        assert all(rt[what][key] > 0 for what in ("train", "inference") for key in ("cpu", "reference_cpu"))
        assert rt["twin_layers"] == layers and abs(rt["deq_params"] / rt["twin_params"] - 1) < 1e-3
    assert "held to the iterations its run logged" in rows[-1] and "step record" in rows[-4]
    assert "Sized as the paper's pair: the deep network is the 18-layer transformer-xl (width 16" in rows[-4]
    assert "Sized as the paper's pair: the deep network is the 70-layer trellisnet (width 16" in rows[-1]
    assert rows[0].count("Seed spread: the Transformer-XL twin's test ppl over seeds 0, 1, 2") == 1
    assert "Seed spread" in rows[2] and "Seed spread" not in rows[1]  # the two perplexity rows
    capsys.readouterr()
    assert reproduce.main(["claims", "--quick", "--output-dir", str(out), "--data-dir", str(corpus)]) == 0
    copy_runs = len(copy400.runs(quick=True))
    found = len(reproduce.PRESETS) + len(lc.SPREAD_SEEDS) + copy_runs  # the spread's seed 0 is read twice
    assert capsys.readouterr().out.count("finished run found") == found
    # the run logs without checkpoints, restored elsewhere, give the same table without training anything
    logs = tmp_path / "run_logs"
    for folder in sorted((out / "runs").iterdir()):
        (logs / folder.name).mkdir(parents=True)
        for name in ("config.json", "metrics.jsonl", reproduce.STEP_RECORD):
            if (folder / name).is_file():
                (logs / folder.name / name).write_bytes((folder / name).read_bytes())
    elsewhere = tmp_path / "elsewhere"
    assert reproduce.main(["restore", "--from", str(logs), "--output-dir", str(elsewhere)]) == 0
    restored = len(reproduce.PRESETS) + len(lc.SPREAD_SEEDS) - 1 + copy_runs
    assert capsys.readouterr().out.count("restored ") == restored
    assert reproduce.main(["claims", "--quick", "--finished-only", "--output-dir", str(elsewhere), "--data-dir",
                           str(corpus)]) == 0  # fmt: skip
    assert not any((elsewhere / "runs").glob("*/checkpoints"))
    again = json.loads((elsewhere / "claims.json").read_text())
    assert again["measured"] == dump["measured"] and again["step_times"] == dump["step_times"]
    assert again["seed_spread"] == dump["seed_spread"] and again["copy400"] == dump["copy400"]
    timed = {c.key for c in lc.CLAIMS if c.key.startswith("runtime-")}  # timed afresh: verdicts may differ
    assert {k: v for k, v in again["verdicts"].items() if k not in timed} == {
        k: v for k, v in dump["verdicts"].items() if k not in timed
    }
    assert NOT_MEASURED not in {again["verdicts"][k] for k in timed}
    assert [again["runtimes"][k]["nfe"] for k in sorted(again["runtimes"])] == [
        dump["runtimes"][k]["nfe"] for k in sorted(dump["runtimes"])
    ]
    # without its step record, a run whose checkpoint is gone leaves the speed claim unmeasured, saying why
    (elsewhere / "runs" / f"{reproduce.DEQ}-seed0" / reproduce.STEP_RECORD).unlink()
    assert reproduce.main(["claims", "--quick", "--finished-only", "--output-dir", str(elsewhere), "--data-dir",
                           str(corpus)]) == 0  # fmt: skip
    verdicts = json.loads((elsewhere / "claims.json").read_text())["verdicts"]
    assert verdicts["jr-speed"] == NOT_MEASURED and verdicts["jr-nfe-ppl"] == dump["verdicts"]["jr-nfe-ppl"]
    assert "no step record of deq-transformer" in (elsewhere / "claims.md").read_text()


def test_restore_needs_run_logs(tmp_path, capsys):
    assert reproduce.main(["restore", "--from", str(tmp_path), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m lab.lm: error: ") and "no run folders" in err, err


def test_the_command_runs_from_the_repository_root(tmp_path):
    """``python -m lab.lm`` from a checkout's root (lab is not installed): a usage error is one line, exit status 2."""
    done = run_module("lab.lm", "restore", "--output-dir", str(tmp_path / "out"), cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("python -m lab.lm: error: restore needs --from"), done.stderr


def test_finished_only_measures_the_finished_runs_and_trains_nothing(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    argv = ["claims", "--quick", "--finished-only", "--output-dir", str(out), "--data-dir", str(corpus)]
    assert reproduce.main(argv) == 2  # no DEQ run yet: one line, exit status 2, nothing trained
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has not finished" in err and not (out / "runs").exists(), err
    for preset in (reproduce.DEQ, reproduce.TXL, reproduce.JR[0]):
        folder = reproduce.run_dir(out, preset, 0)
        reproduce.ensure_run(reproduce.run_config(preset, 0, corpus, True), folder, preset)
    interrupted = reproduce.run_config(reproduce.TIED, 0, corpus, True)
    train(replace_config(interrupted, {"run.stop_after": 12}), reproduce.run_dir(out, reproduce.TIED, 0), name="tied")
    capsys.readouterr()
    assert reproduce.main(argv) == 0
    assert "finished run found" not in capsys.readouterr().out
    verdicts = json.loads((out / "claims.json").read_text())["verdicts"]
    assert verdicts["deq-vs-tied-ppl"] == verdicts["deq-vs-tied-memory"] == NOT_MEASURED
    assert verdicts["jr-nfe-ppl"] == verdicts["jr-speed"] == NOT_MEASURED
    assert verdicts["deq-vs-txl-ppl"] != NOT_MEASURED and verdicts["deq-vs-txl-memory"] != NOT_MEASURED
    assert verdicts["deq-vs-txl-ppl-plateau"] == verdicts["deq-vs-tied-ppl-plateau"] == NOT_MEASURED
    text = (out / "claims.md").read_text()
    missing_jr = ", ".join(p.removeprefix("pdocs-") for p in reproduce.JR[1:])
    assert "not finished: transformer-tied " in text and f"not finished: {missing_jr} " in text
    assert "not finished: plateau32-deq-transformer, plateau32-transformer-xl " in text
    trellis = ("deq-trellisnet-vs-unrolled-ppl-plateau", "deq-trellisnet-vs-unrolled-memory",
               "runtime-deq-trellisnet-train", "runtime-deq-trellisnet-inference")  # fmt: skip
    assert {verdicts[k] for k in trellis} == {NOT_MEASURED}
    assert "not finished: trellis-deq-trellisnet, trellis-trellisnet " in text
    assert {verdicts[c.key] for c in copy400.CLAIMS} == {NOT_MEASURED}
    assert "not finished: copy400-cpu-deq-transformer, copy400-cpu-tcn, copy400-cpu-lstm, copy400-cpu-gru " in text
    assert all(verdicts[f"runtime-deq-transformer-{what}"] != NOT_MEASURED for what in ("train", "inference"))
    assert (out / "ppl_vs_nfe.png").stat().st_size > 0  # the finished JR setting is plotted
    assert read_metrics(reproduce.run_dir(out, reproduce.TIED, 0) / "metrics.jsonl")[-1]["step"] <= 12


def test_plan_lists_every_run_with_its_step_time(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    assert reproduce.main(["plan", "--quick", "--output-dir", str(tmp_path / "out"), "--data-dir", str(corpus)]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| pdocs-")]
    assert [row[0].strip("| ") for row in rows] == list(reproduce.PRESETS)
    for row in rows:
        assert int(row[2]) == 24 * 4 * 16 and float(row[3]) > 0 and float(row[4]) > 0


def test_spread_note_weighs_the_distance_from_the_threshold_against_the_seed_spread():
    spread = [20.0, 20.4, 19.6]  # relative std 2 %: the ratio of two single runs varies by 2.83 %
    deq, twin = measured("deq", 21.0, 15), measured("txl", 20.0, 0)  # 1.050x: on the threshold
    note = lc.spread_note(spread, deq, twin)
    assert "a relative std of 2.00% per run" in note and "varies by about 2.83%" in note
    assert "0.0% from its threshold (1.050x vs 1.05x), within twice that: these seeds do not decide" in note
    far = lc.spread_note(spread, measured("deq", 24.0, 15), twin)  # 1.2x: 14.3 % beyond
    assert "14.3% from its threshold" in far and "more than twice that: these seeds decide the verdict" in far
    three = dataclasses.replace(deq, ppl=(21.0, 21.0, 21.0))  # the DEQ over 3 seeds: sqrt(1/3 + 1) x 2 %
    assert "varies by about 2.31%" in lc.spread_note(spread, three, twin)


def test_plateau_rows_count_only_runs_whose_validation_perplexity_stopped_falling():
    steps = (3000, 6000, 8000, 9000)
    deq = lc.Measured("deq", (21.0,), (15.0,), 100, 25, valid_ppl=(40.0, 21.6, 21.5, 21.3), valid_steps=steps)
    twin = lc.Measured("txl", (20.5,), (0.0,), 100, 100, layers=4, valid_ppl=(38.0, 20.6, 20.4, 20.3),
                       valid_steps=steps)  # fmt: skip
    assert lc.plateau_fall(deq) == pytest.approx(1 - 21.3 / 21.6)  # from step 6000, the last <= 9000 - 2000
    row = lc.plateau_ppl_row(deq, twin, lc.PPL_VS_TXL_PLATEAU, "c")
    assert row.verdict == HOLDS and row.note.startswith("Both at a plateau (valid ppl fall over the last 2,000 steps:")
    worse = lc.plateau_ppl_row(dataclasses.replace(deq, ppl=(22.0,)), twin, lc.PPL_VS_TXL_PLATEAU, "c")
    assert worse.verdict == DOES_NOT_HOLD and "valid ppl ratio DEQ / twin" in worse.note
    falling = dataclasses.replace(twin, valid_ppl=(38.0, 21.0, 20.0, 19.0))  # 9.5 % over the window
    row = lc.plateau_ppl_row(deq, falling, lc.PPL_VS_TXL_PLATEAU, "c")
    assert row.verdict == NOT_MEASURED and "Not both at a plateau" in row.note and "txl 9.5%" in row.note
    with pytest.raises(ValueError, match="two validation evaluations"):
        lc.plateau_fall(dataclasses.replace(deq, valid_steps=()))


def copy_runs(losses: dict[str, float], params: dict[str, int] | None = None) -> dict[str, copy400.Copy400]:
    """Made-up T = 400 runs: three seeds of each model around ``losses`` (model -> mean test loss)."""
    params = params or {}
    return {m: copy400.Copy400(m, (0.5 * x, x, 1.5 * x), (1.0, 1.0, 1.0), params.get(m, 14_000),
                               (10 * x, 2 * x, x), (1000, 2000, 3000)) for m, x in losses.items()}  # fmt: skip


def test_copy400_thresholds():
    paper_like = {"deq-transformer": 3e-6, "tcn": 3e-5, "lstm": 0.05, "gru": 0.049, "deq-trellisnet": 1e-3}
    rows = copy400.rows(copy_runs(paper_like), "cmd")
    assert [r.verdict for r in rows] == [HOLDS] * 3
    assert "Valid loss fall over the last 1,000 steps" in rows[0].note and "tcn +50.0%" in rows[0].note
    tcn_wins = dict(paper_like, **{"deq-transformer": 2e-4, "tcn": 1e-4})
    rows = copy400.rows(copy_runs(tcn_wins), "cmd")
    assert [r.verdict for r in rows] == [DOES_NOT_HOLD, HOLDS, DOES_NOT_HOLD]
    assert "measured: DEQ-Transformer test accuracy" in rows[0].note and "; tcn: " in rows[0].note
    assert "cause not yet isolated: the ablation copy400-cpu-transformer-tied has not finished" in rows[0].note
    for unrolled, where in ((3e-4, "the gap comes with the cell, not the equilibrium"),
                            (5e-5, "the gap comes with the equilibrium"),
                            (1.5e-4, "the unrolled cell keeps 58% of the DEQ's gap (log scale): the gap comes mostly "
                                     "with the cell"),
                            (1.2e-4, "the unrolled cell keeps 26% of the DEQ's gap (log scale): the gap comes "
                                     "mostly with the equilibrium")):  # fmt: skip
        note = copy400.rows(copy_runs(dict(tcn_wins, **{copy400.ABLATION: unrolled})), "cmd")[0].note
        assert f"{unrolled / 1e-4:.3g}x tcn's (the DEQ: 2x), so {where}" in note, note
    near_rnn = dict(paper_like, **{"deq-transformer": 0.006, "tcn": 0.01})  # lowest, only 8.2x below the GRU
    assert [r.verdict for r in copy400.rows(copy_runs(near_rnn), "cmd")] == [HOLDS, DOES_NOT_HOLD, DOES_NOT_HOLD]
    unequal = copy400.rows(copy_runs(paper_like, {"tcn": 16_200}), "cmd")  # 15.7 % more than the DEQ's 14,000
    assert [r.verdict for r in unequal] == [DOES_NOT_HOLD, DOES_NOT_HOLD, HOLDS]
    assert "parameters differ by more than 15%: tcn." in unequal[0].note
    missing = copy400.rows(copy_runs({m: x for m, x in paper_like.items() if m != "gru"}), "cmd")
    assert {r.verdict for r in missing} == {NOT_MEASURED} and "copy400-cpu-gru" in missing[0].note


def test_gradient_reach_of_the_copy400_models():
    """The recall's gradient reaches the symbols to copy through attention and the TCN's dilations; through the
    DEQ-TrellisNet (kernel 2, dilation 1: one position per application of its cell) it reaches back at most its
    backward solve's 15 iterations, whatever the weights."""
    assert copy400.gradient_reach(copy400.run_config("deq-transformer", 0, quick=False)) == 0
    assert copy400.gradient_reach(copy400.run_config("tcn", 0, quick=False)) == 0
    trellis = copy400.run_config("deq-trellisnet", 0, quick=False)
    recall_start = trellis.data.T + 20 - copy400.RECALL  # T + 20 positions, the last RECALL of them recall
    assert trellis.deq.backward_max_iter == 15
    assert recall_start - 15 <= copy400.gradient_reach(trellis) < recall_start


def test_copy400_runs_are_the_presets_with_their_seeds():
    runs = copy400.runs(quick=False)
    expected = [(f"copy400-cpu-{m}", s) for m in copy400.MODELS for s in copy400.SEEDS]
    assert [(p, s) for p, s, _ in runs] == [*expected, ("copy400-cpu-transformer-tied", 0)]
    for preset, seed, cfg in runs:
        assert cfg == replace_config(get_config(preset), {"run.seed": seed})
        words = shlex.split(reproduce.config_command(preset, cfg, Path("OUT") / preset))
        assert "--data-dir" not in words
        assert (words[-1] == f"run.seed={seed}") == (seed != 0), words  # seed 0 is the preset's own


def test_trellis_ppl_row_notes_the_inference_sweep_when_there_is_one():
    deq = dataclasses.replace(measured("deq", 110.0, 30), valid_ppl=(120.0, 110.0), valid_steps=(1000, 8000))
    twin = dataclasses.replace(measured("twin", 100.0, 0), valid_ppl=(101.0, 100.0), valid_steps=(1000, 8000))
    found = {reproduce.TRELLIS_DEQ: deq, reproduce.TRELLIS_TWIN: twin}
    plain = reproduce.trellis_rows(found, "cmd")
    swept = reproduce.trellis_rows(found, "cmd", {60: 104.0, 30: 110.0})
    assert "Inference limits" not in plain[0].note and swept[0].verdict == plain[0].verdict
    assert swept[0].note.endswith("Inference limits 30 / 60: DEQ test ppl 110.00 (1.100x) / 104.00 (1.040x) the twin's "
                                  "(RUN/sweep.json).")  # fmt: skip
