"""``python -m lab.toy claims``: the quick smoke run writes the claims table and finished runs are read back, the
verdicts follow the thresholds fixed in lab.toy.claims, the committed runs (packages/deq-toy/results/claims) are the
runs of its plan; ``lab.toy.step_profile`` counts the calls of the cell."""

import functools
import json
import shutil
from pathlib import Path

from deq_core.train.run_config import RUN_RESUMABLE, replace_config
from deq_toy.configs import load_config
from lab.toy import __main__ as lab_toy
from lab.toy.claims import arithmetic, synthetic


def test_quick_claims_write_one_row_per_claim_and_rerun_reads_finished_runs(tmp_path, capsys):
    out = tmp_path / "claims"
    assert lab_toy.main(["claims", "--quick", "--output-dir", str(out), "--no-progress"]) == 0
    text = (out / "claims.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 10
    assert all(any(f"**{v}**" in r for v in ("HOLDS", "DOES NOT HOLD")) for r in rows)  # every claim measured
    assert "jacobian-regularization-icml2021.txt" in rows[0] and "Figure 10" in rows[1]
    assert "lab.toy claims --quick" in rows[0]
    assert "GRU-DEQ" in rows[1] and rows[1].count("(n=2: ") == 4  # the ordering: means over the quick plan's 2 seeds
    assert (out / "arithmetic" / "arith-repeated-gru-seed1" / "results.json").is_file()
    assert (out / "synthetic_ablation.md").read_text().count("\n| ") == 7  # header + 6 settings
    first = out / "synthetic" / "gamma2_seed1" / "results.json"
    stamp = first.stat().st_mtime_ns
    capsys.readouterr()
    assert lab_toy.main(["claims", "--quick", "--output-dir", str(out), "--no-progress"]) == 0
    assert first.stat().st_mtime_ns == stamp  # read, not retrained
    assert (out / "claims.md").read_text() == text
    # As committed (results/claims): run logs without weights. The table is rebuilt as it was, the figure kept.
    for folder in sorted(out.rglob("checkpoints"), reverse=True):
        shutil.rmtree(folder)
    figure = out / "synthetic" / "figure5.png"
    figure_stamp = figure.stat().st_mtime_ns
    capsys.readouterr()
    assert lab_toy.main(["claims", "--quick", "--output-dir", str(out), "--no-progress"]) == 0
    assert (out / "claims.md").read_text() == text
    assert figure.stat().st_mtime_ns == figure_stamp and "figure5.png not redrawn" in capsys.readouterr().out


def test_claims_rejects_run_overrides(tmp_path, capsys):
    assert lab_toy.main(["claims", "--quick", "--output-dir", str(tmp_path), "lr=1"]) == 2
    assert "claims takes only" in capsys.readouterr().err


def _synthetic(nfe: float, slope: float, mse: float) -> dict:
    return {"nfe_fixed_point_mean": nfe, "dfdz_mean": slope, "mse": mse}


def test_synthetic_verdict_follows_its_thresholds():
    base = [_synthetic(12.0, 0.5, 0.0030), _synthetic(14.0, 0.5, 0.0032)]
    good = {0.0: base, 2.0: [_synthetic(4.0, 0.05, 0.0040)] * 2, 4.0: [_synthetic(3.0, 0.02, 0.0045)] * 2}
    assert synthetic.verdict(good)[0]
    worse_fit = {**good, 4.0: [_synthetic(3.0, 0.02, 0.0047)] * 2}  # 0.0047 > 1.5 x 0.0031
    assert not synthetic.verdict(worse_fit)[0]
    slow = {**good, 2.0: [_synthetic(4.5, 0.05, 0.0040)] * 2}  # 13 / 4.5 < 3
    assert not synthetic.verdict(slow)[0]


def _arith(acc: float, residual: float = 5e-4, converged: float = 1.0, two: float = 96.0) -> dict:
    four = {"acc": acc, "residual": residual, "converged": converged, "nfe_forward": 20.0}
    return {"test_four": four, "test_two": {"acc": two}, "test_two_biased": {"acc": two - 2.0}}


def _results() -> dict:
    """Per run, the results of each seed (the seeded runs: three seeds whose mean is the first value)."""
    return {
        "arith-fc": [_arith(64.0), _arith(63.0), _arith(65.0)],
        "arith-gru": [_arith(80.0), _arith(79.5), _arith(80.5)],
        "arith-stacked-gru": [_arith(85.0)] * 3,
        "arith-deq": [_arith(87.0), _arith(86.0), _arith(88.0)],
        "arith-gru-batch64": [_arith(81.0)],
        "arith-gru-two": [_arith(0.0, two=96.0)],
        "arith-deq-two": [_arith(0.0, two=96.3)],
    }


def test_arithmetic_accuracy_verdicts_follow_their_thresholds():
    res = _results()
    rows = {r.claim.key: r.holds for r in arithmetic.accuracy_rows(res, "cmd")}
    assert rows == {"ordering": True, "deq-accuracy": True, "batch-schedule": True, "two-ops": True}
    res["arith-deq"] = [_arith(84.0), _arith(85.5), _arith(84.0)]  # one seed above 85 %, the mean below
    res["arith-gru-batch64"] = [_arith(82.0)]
    res["arith-deq-two"] = [_arith(0.0, two=95.9)]  # below the GRU's 96.0
    rows = {r.claim.key: r.holds for r in arithmetic.accuracy_rows(res, "cmd")}
    assert rows == {"ordering": False, "deq-accuracy": False, "batch-schedule": False, "two-ops": False}
    res["arith-gru-batch64"] = [_arith(80.5)]  # within 1.5 points of arith-gru's mean again
    assert {r.claim.key: r.holds for r in arithmetic.accuracy_rows(res, "cmd")}["batch-schedule"] is True


def test_ordering_compares_means_over_seeds_and_prints_their_spread():
    res = _results()
    res["arith-stacked-gru"] = [_arith(87.5), _arith(84.0), _arith(84.0)]  # seed 0 above the GRU-DEQ's seed 0
    row = arithmetic.accuracy_rows(res, "cmd")[0]
    assert row.holds and "stacked GRU 85.17 ± 2.02 (n=3: 87.50, 84.00, 84.00)" in row.ours
    assert "GRU-DEQ 87.00 ± 1.00 (n=3: 87.00, 86.00, 88.00)" in row.ours
    res["arith-stacked-gru"] = [_arith(87.5), _arith(86.0), _arith(87.9)]  # mean 87.13 > 87.0
    assert not arithmetic.accuracy_rows(res, "cmd")[0].holds


def test_repeated_gru_gap_note_says_who_is_ahead_and_the_seeds_spread():
    res = _results()  # GRU-DEQ 87.0 ± 1.0 over three seeds
    note = arithmetic.repeated_gap_note([_arith(85.0), _arith(86.0)], res)
    assert "the GRU-DEQ is ahead by 1.50 points (means over 3 and 2 seeds" in note
    assert "1.00 points for the GRU-DEQ and 0.71 points for the repeated GRU" in note
    one = arithmetic.repeated_gap_note([_arith(88.2)], res)
    assert "the repeated GRU is ahead by 1.20 points (means over 3 and 1 seeds" in one
    assert "deviation is 1.00 points for the GRU-DEQ." in one


def _train_log(path, residuals):
    path.mkdir(parents=True)
    lines = [
        json.dumps({"step": 10 * (i + 1), "split": "train", "residual": r, "nfe_forward": 8, "converged": 1.0})
        for i, r in enumerate(residuals)
    ]
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_arithmetic_solver_verdicts_follow_their_thresholds(tmp_path):
    for name in ("arith-deq", "arith-deq-plain"):
        _train_log(tmp_path / "arithmetic" / name, [5e-4, 6e-4])
    res = _results()
    profile = {"run_minutes": 44.0, "summary": "0.6 s per step"}
    profiles = {"arith-deq": profile, "arith-deq-plain": {**profile, "run_minutes": 300.0}}
    rows = {r.claim.key: r.holds for r in arithmetic.solver_rows(res, profiles, tmp_path, "cmd")}
    assert rows == {"deq-converges": True, "speed": True}
    res["arith-deq"] = [_arith(87.0), _arith(87.0, residual=5e-4, converged=0.98)]  # one seed: 2 % unconverged
    profiles["arith-deq"] = {**profile, "run_minutes": 46.0}
    rows = {r.claim.key: r.holds for r in arithmetic.solver_rows(res, profiles, tmp_path, "cmd")}
    assert rows == {"deq-converges": False, "speed": False}
    res["arith-deq"] = [_arith(87.0), _arith(87.0, residual=1.1e-3)]  # one seed above the tolerance
    assert not arithmetic.solver_rows(res, profiles, tmp_path, "cmd")[0].holds


def _valid_log(path, accs):
    path.mkdir()
    lines = [json.dumps({"step": 10 * (i + 1), "split": "valid", "acc": a}) for i, a in enumerate(accs)]
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_plateau_gain_spans_a_quarter_of_the_epochs_and_at_least_two(tmp_path):
    flat = _valid_log(tmp_path / "flat", [60.0 + min(i, 20) for i in range(40)])
    assert arithmetic._plateau_gain(flat) == 0.0  # the last 10 of 40 epochs are flat
    short = _valid_log(tmp_path / "short", [67.0, 70.0, 71.0])
    assert arithmetic._plateau_gain(short) == 4.0  # 3 epochs: the last 2 count, not only the last one


def _claims_plan() -> dict[str, tuple[str, list[str]]]:
    """Run folder under results/claims -> (preset, overrides) of the claims command that trains it."""
    plan = {}
    for name, (preset, extra) in arithmetic.FULL.runs.items():
        for seed in arithmetic.FULL.seeds_of(name):
            plan[f"arithmetic/{arithmetic.seed_folder(name, seed)}"] = (preset, list(arithmetic.seeded(extra, seed)))
    preset, extra = arithmetic.REPEATED_RUN[False]
    for seed in arithmetic.FULL.seeds:
        folder = arithmetic.seed_folder("arith-repeated-gru", seed)
        plan[f"arithmetic/{folder}"] = (preset, list(arithmetic.seeded(extra, seed)))
    full = synthetic.FULL
    for gamma in synthetic.GAMMAS:
        for seed in full.seeds:
            plan[f"synthetic/gamma{gamma:g}_seed{seed}"] = (
                f"synthetic-gamma{gamma:g}",
                [*full.overrides, f"seed={seed}"],
            )
    for i, (_, preset, extra) in enumerate(synthetic.ABLATION):
        for seed in full.ablation_seeds:
            overrides = [*full.overrides, f"epochs={full.ablation_epochs}", *extra, f"seed={seed}"]
            plan[f"synthetic/ablation/{i}_seed{seed}"] = (preset, overrides)
    return plan


def test_committed_runs_of_the_flat_layout_read_as_their_presets():
    """Every config.json committed under results/claims (written by deq-toy 0.4, flat keys, ``anderson_m``,
    ``jacobian_weight``, ``clip``, ``checkpoint_every``; the repeated GRU's by 0.5.1, flat keys beside ``deq``; seeds 1
    and 2 of the arithmetic runs by 0.6.1, in sections) reads back as the config the claims command asks for in its
    folder (its preset with the plan's overrides), so ``ensure_run`` reads those runs instead of training them; every
    run of the plan is committed."""
    from deq_toy.configs import config_from_dict

    root = Path(__file__).resolve().parents[1] / "packages" / "deq-toy" / "results" / "claims"
    stored, plan = sorted(root.rglob("config.json")), _claims_plan()
    assert {str(path.parent.relative_to(root)) for path in stored} == set(plan)  # every run of the plan, once
    for path in stored:
        values = json.loads(path.read_text())["config"]
        config = config_from_dict(values)
        expected = load_config(*plan[str(path.parent.relative_to(root))])
        # the run settings that may change on resume (RUN_RESUMABLE: runs before 0.7 stored mixed_precision "no",
        # the presets leave it unset) are what ensure_run ignores too
        unchanged = {key: functools.reduce(getattr, key.split("."), expected) for key in RUN_RESUMABLE}
        assert replace_config(config, unchanged) == expected, path
        assert "anderson_m" not in values or config.deq.solver_options == (f"m={values['anderson_m']}",)
        assert config.deq.jac_weight == values.get("jacobian_weight", config.deq.jac_weight)
        flat_save_every = values.get("checkpoint_every", values.get("save_every"))  # <= 0.5.0's name, 0.5.1's
        assert flat_save_every is None or config.run.save_every == flat_save_every  # None: the sections' layout
        assert "clip" not in values or config.optim.grad_clip == values["clip"]


def test_step_profile_counts_the_cell_calls_and_adds_up(tmp_path):
    from deq_toy.configs import load_config
    from deq_toy.experiments import build_experiment
    from lab.toy.step_profile import profile_steps

    tiny = ["n_train=64", "n_valid=32", "n_test=32", "hidden=8", "batch_size=16", "epochs=1"]
    experiment = build_experiment(load_config("arith-repeated-gru-tiny", [*tiny, "repeats=5"]), tmp_path)
    profile = profile_steps(experiment, steps=2)
    assert profile.f_calls_forward == 5  # the repeats, counted by the hook on the cell
    assert profile.nfe_backward == 0 and 0 < profile.forward_s <= profile.step_s and profile.f_s > 0
    assert profile.total_steps == 4 and profile.run_minutes == 4 * profile.step_s / 60
    experiment = build_experiment(load_config("arith-deq-tiny", tiny), tmp_path)
    deq = profile_steps(experiment, steps=2)
    assert deq.f_calls_forward >= 2 and deq.nfe_backward >= 1  # a forward solve and an implicit backward ran
    assert "calls of f" in deq.summary() and "backward NFE" in deq.summary()
