"""Training on the other data variants and with readout=last: which data a run reads, which test sets it reports,
and the reproduce tables built from such runs (tiny sizes, seconds)."""

import json

from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.run_config import replace_config
from deq_toy import reproduce
from deq_toy.configs import get_config
from deq_toy.data.arithmetic import SYMBOL_INDEX, VARIANTS
from deq_toy.experiments.arithmetic import ArithmeticExperiment, prepare_data

TINY = ["epochs=1", "n_train=64", "n_valid=32", "n_test=32", "hidden=8", "deq.max_iter=5", "deq.backward_max_iter=5"]
TINY += ["repeats=3", "log_every=1", "eval_every=2"]


def _uses(tokens, symbols):
    return any(bool((tokens == SYMBOL_INDEX[s]).any()) for s in symbols)


def test_variant_selects_training_data_and_every_test_set_is_reported(tmp_path):
    config = replace_config(
        get_config("arith-gru-tiny"), {"data.variant": "two_biased", "readout": "last", "n_test": 16}
    )
    experiment = ArithmeticExperiment(config, tmp_path)
    assert not _uses(experiment.train_x, "*/") and not _uses(
        experiment.valid_x, "*/"
    )  # only + and - in the 2-op variants
    minus = float((experiment.train_x == SYMBOL_INDEX["-"]).sum()) / float(
        (experiment.train_x == SYMBOL_INDEX["+"]).sum()
    )
    assert 2.0 < minus < 4.5  # '-' three times as likely as '+'
    sets = experiment.evaluation_sets()
    assert set(sets) == {f"test_{v}" for v in VARIANTS} | {f"test_longer_{v}" for v in VARIANTS}
    for name, (tokens, labels) in sets.items():
        assert tokens.shape == (16, 41 if "longer" in name else 31) and labels.shape == (16,)
        variant = name.removeprefix("test_").removeprefix("longer_")
        assert _uses(tokens, "*/") == variant.startswith("four"), name
    flat = ArithmeticExperiment(replace_config(config, {"model.readout": "flatten"}), tmp_path)
    assert set(flat.evaluation_sets()) == {f"test_{v}" for v in VARIANTS}  # the flatten readout needs 31 symbols


def test_prepare_data_writes_every_file_a_run_reads(tmp_path):
    config = replace_config(get_config("arith-deq-tiny"), {"variant": "two", "readout": "last"})
    paths = prepare_data(tmp_path, config)
    names = sorted(p.name for p in (tmp_path / "arith-seed0").iterdir())
    assert names == sorted(p.name for p in paths) and len(names) == 10
    assert "two-train-len31.tsv" in names and "four_biased-test-len41.tsv" in names
    assert "four-train-len31.tsv" not in names
    before = {p: p.stat().st_mtime_ns for p in paths}
    experiment = ArithmeticExperiment(config, tmp_path)
    experiment.evaluation_sets()
    assert sorted(p.name for p in (tmp_path / "arith-seed0").iterdir()) == names  # nothing else was needed
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # and nothing was rewritten


def test_reproduce_tables_per_training_variant_and_readout(tmp_path, capsys):
    out, data = tmp_path / "out", tmp_path / "data"
    argv = ["arithmetic", "--output-dir", str(out), "--data-dir", str(data), "--no-progress"]
    argv += ["--runs", "arith-gru,arith-deq", "--variants", "two,four_biased", "--name", "t2", *TINY, "readout=last"]
    assert reproduce.main(argv) == 0
    for variant in ("two", "four_biased"):
        for preset in ("arith-gru", "arith-deq"):
            config = json.loads((out / variant / preset / "config.json").read_text())["config"]
            assert config["data"]["variant"] == variant and config["model"]["readout"] == "last"
            results = json.loads((out / variant / preset / "results.json").read_text())
            assert {"test_longer_two", "test_longer_four"} <= set(results)
    table = (out / "t2.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| GRU")]
    assert [r.split(" | ")[:3] for r in rows] == [
        ["| GRU", "2 ops", "last"],
        ["| GRU-DEQ", "2 ops", "last"],
        ["| GRU", "4 ops biased", "last"],
        ["| GRU-DEQ", "4 ops biased", "last"],
    ]
    results = json.loads((out / "two" / "arith-deq" / "results.json").read_text())
    cells = rows[1].strip("| ").split(" | ")
    assert cells[3] == f"{results['test_two']['acc']:.2f}" and cells[8] == cells[3]  # "test" is the 2-op test set
    assert cells[10] == f"{results['test_longer_two']['acc']:.2f}"  # the longer set of the training variant
    assert cells[-1] == "96.3" and rows[3].endswith("| 85.9 |")  # the report's number of the same training data
    assert (out / "t2_residual.png").exists()
    # A second call only reads the finished runs; another config for the same folders is refused.
    manifest = latest_complete_checkpoint(out / "two" / "arith-gru") / "checkpoint.json"
    stamp = manifest.stat().st_mtime_ns
    assert reproduce.main(argv) == 0
    assert manifest.stat().st_mtime_ns == stamp
    capsys.readouterr()
    assert reproduce.main(argv[:-1] + ["readout=flatten"]) == 2
    assert "another config" in capsys.readouterr().err


def test_reproduce_flatten_table_has_no_longer_number_and_prepare_data_trains_nothing(tmp_path):
    out = tmp_path / "out"
    base = ["arithmetic", "--output-dir", str(out), "--no-progress", "--runs", "arith-fc", *TINY]
    assert reproduce.main(base + ["--prepare-data"]) == 0
    assert not (out / "arith-fc").exists() and (out / "data" / "arith-seed0" / "four-train-len31.tsv").exists()
    assert reproduce.main(base) == 0
    row = (out / "table.md").read_text().splitlines()[-1].split(" | ")
    assert row[:3] == ["| FC", "4 ops", "flatten"] and row[10] == "n/a" and row[-1] == "64.58 |"
    assert not (out / "table_residual.png").exists()  # no DEQ or repeated GRU among the runs


def test_reproduce_arithmetic_option_errors(tmp_path, capsys):
    out = ["--output-dir", str(tmp_path)]
    cases = [
        (["arithmetic", *out, "--runs", "arith-gru,arith-xyz"], "unknown arithmetic runs ['arith-xyz']"),
        (["arithmetic", *out, "--variants", "three"], "unknown variants ['three']"),
        (["arithmetic", *out, "--variants", "two", "variant=two"], "either with --variants or with data.variant="),
        (["arithmetic", *out, "--name", "a/b"], "--name must be a plain file name"),
        (["synthetic", *out, "--runs", "arith-gru"], "apply to the arithmetic tables only"),
    ]
    for argv, message in cases:
        assert reproduce.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("python -m deq_toy.reproduce: error: ") and message in err, err
    assert not any(tmp_path.rglob("*.pt"))  # nothing was trained
