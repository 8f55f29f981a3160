"""Export: a trained run written by ``python -m deq_lm.export`` (PretrainedLM.save_pretrained: model.safetensors,
config.json, the vocabulary, README.md) loads back through ``deq_lm.export.load_pretrained`` into a model with the
outputs of the one evaluate loads; loading reads JSON and safetensors only and never imports a solver named in
config.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import write_tiny_corpus
from deq_core.train.checkpoints import CheckpointError, checkpoint_path
from deq_core.train.hub import HubModelError
from deq_core.train.testing.faults import EXPORT_FAULTS, check_export_fault
from deq_lm import evaluate, export
from deq_lm.data import copy_memory_split
from deq_lm.hub import PretrainedLM
from deq_lm.train import evaluate_split
from deq_lm.train import main as train_main

CPU = torch.device("cpu")


def _train_and_export(root: Path, preset: str, *extra: str) -> tuple[Path, Path]:
    run, out = root / "run", root / "out"
    assert train_main(["--config", preset, "steps=4", "eval_every=4", *extra, "--output-dir", str(run)]) == 0
    assert export.main([str(run), str(out)]) == 0
    return run, out


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run, export folder) of tiny-deq-transformer on copy memory, 4 steps."""
    return _train_and_export(tmp_path_factory.mktemp("copy"), "tiny-deq-transformer")


def _same_outputs(a: torch.nn.Module, b: torch.nn.Module, tokens: torch.Tensor) -> None:
    with torch.no_grad():
        x, y = a(tokens), b(tokens)
        torch.testing.assert_close(x.logits, y.logits, rtol=0, atol=0)
        torch.testing.assert_close(x.hidden, y.hidden, rtol=0, atol=0)


def test_export_writes_weights_and_config(copy_run: tuple[Path, Path]) -> None:
    run, out = copy_run
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]  # no vocabulary
    config = json.loads((out / "config.json").read_text())
    saved = json.loads((run / "config.json").read_text())["config"]
    assert config["architecture"] == "deq_transformer" and config["vocab_size"] == 10
    assert config["task"] == "copy_memory" and config["model"] == saved["model"] and config["deq"] == saved["deq"]
    with pytest.raises(HubModelError, match="this copy_memory model has no vocabulary: its inputs are symbol ids"):
        PretrainedLM.from_pretrained(out).encode("1 2 3")


def test_load_pretrained_gives_the_outputs_and_metrics_of_the_run(copy_run: tuple[Path, Path]) -> None:
    run, out = copy_run
    cfg, problem, reference, _ = evaluate.load_model(run)
    model = export.load_pretrained(out)
    assert not model.training and model.body.deq.max_iter == reference.body.deq.max_iter == 15
    tokens, _ = copy_memory_split(16, cfg.data.T, seed=123)
    _same_outputs(model, reference, tokens)
    assert evaluate_split(model, problem, "test", CPU) == evaluate_split(reference, problem, "test", CPU)


def test_a_language_model_with_tied_weights_and_memory(tmp_path: Path) -> None:
    """Tied input / output embedding stored once and tied again on loading; the memory carried from one segment to
    the next gives the same outputs too."""
    corpus = write_tiny_corpus(tmp_path / "corpus")
    run, out = _train_and_export(tmp_path, "tiny-lm-deq-transformer", "--data-dir", str(corpus))
    _, problem, reference, _ = evaluate.load_model(run)
    model = export.load_pretrained(out)
    assert model.head.weight is model.embed.weight
    tokens = torch.randint(0, problem.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        first, first_ref = model(tokens[:, :8]), reference(tokens[:, :8])
        second, second_ref = model(tokens[:, 8:], first.state), reference(tokens[:, 8:], first_ref.state)
    torch.testing.assert_close(first.logits, first_ref.logits, rtol=0, atol=0)
    torch.testing.assert_close(second.logits, second_ref.logits, rtol=0, atol=0)
    assert evaluate_split(model, problem, "test", CPU) == evaluate_split(reference, problem, "test", CPU)


def test_an_explicit_model_exports_too(tmp_path: Path) -> None:
    run, out = _train_and_export(tmp_path, "tiny-lstm")
    assert "deq" not in json.loads((out / "config.json").read_text())
    _, _, reference, _ = evaluate.load_model(run)
    _same_outputs(export.load_pretrained(out), reference, copy_memory_split(4, 6, seed=1)[0])


def test_a_config_json_never_imports_a_solver(copy_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, out = copy_run
    marker = tmp_path / "imported"
    (tmp_path / "planted_solver.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Solver: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = tmp_path / "planted"
    shutil.copytree(out, folder)
    config = json.loads((folder / "config.json").read_text())
    config["deq"]["backward_solver"] = "planted_solver:Solver"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="import path 'planted_solver:Solver'"):
        export.load_pretrained(folder)
    assert not marker.exists()
    cfg, _, reference, _ = evaluate.load_model(run)
    model = export.load_pretrained(folder, deq=cfg.deq.layer())  # the user's own layer: loads
    _same_outputs(model, reference, copy_memory_split(4, cfg.data.T, seed=2)[0])
    assert not marker.exists()


def test_loading_refuses_what_is_not_an_export(copy_run: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = copy_run
    with pytest.raises(HubModelError, match="has no config.json"):
        export.load_pretrained(tmp_path)
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    torch.save({"weights": torch.zeros(1)}, bad / "model.safetensors")  # a pickle under the weights' name
    with pytest.raises(CheckpointError, match="cannot be read as tensors"):
        export.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({"architecture": "deq_transformer"}))
    with pytest.raises(HubModelError, match="is not a deq-lm model's"):
        export.load_pretrained(bad)


def test_export_refuses_a_folder_in_use_and_a_missing_run(copy_run, tmp_path: Path, capsys) -> None:
    run, out = copy_run
    before = (out / "config.json").read_text()
    assert export.main([str(run), str(out)]) == 2
    assert export.main([str(tmp_path / "nowhere"), str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "exists and is not an empty folder" in err[0] and "is neither a run directory" in err[1]
    assert (out / "config.json").read_text() == before and not (tmp_path / "new").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export.export_run(checkpoint_path(run, 4), empty) == empty  # a checkpoint folder, an empty OUT
    assert (empty / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


@pytest.mark.parametrize("fault", EXPORT_FAULTS)
def test_a_destination_that_cannot_be_used_is_one_line(copy_run, tmp_path: Path, capsys, fault: str) -> None:
    """A read-only folder, a full device, a link planted at OUT.partial or a dangling link at OUT: one line, exit
    status 2, nothing of the export left behind and nothing written where a link points."""
    check_export_fault(fault, export.main, copy_run[0], tmp_path / "dest", lambda: capsys.readouterr().err)
