"""deq_lm.hub.PretrainedLM: a tiny language-model run saved with save_pretrained (word-level vocabulary or
SentencePiece) loads back with from_pretrained into the model evaluate loads (same logits, same test metrics) with a
vocabulary that encodes text into the corpus' own ids; the model card holds the run's final metrics; a folder
that is not a deq-lm model, or misses its vocabulary, is one line; the export command's --push-to-hub uploads the
folder through huggingface_hub (its HfApi replaced by deq_core.train.testing.hub's stand-in: no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
import torch

from conftest import write_tiny_corpus
from deq_core.train.checkpoints import CheckpointError
from deq_core.train.hub import HubModelError
from deq_core.train.metrics import read_metrics
from deq_core.train.testing.hub import COMMIT, StandInHub
from deq_lm import evaluate, export
from deq_lm.hub import PretrainedLM
from deq_lm.train import evaluate_split
from deq_lm.train import main as train_main

CPU = torch.device("cpu")
TEXT = "the cat sat on the mat and then it slept\na zebra ran\n"  # "zebra" is not in the tiny corpus


def _train(root: Path, preset: str, *extra: str) -> tuple[Path, Path]:
    """(run folder, corpus folder) of ``preset`` trained 4 steps on the tiny corpus."""
    corpus = write_tiny_corpus(root / "corpus")
    run = root / "run"
    args = ["--config", preset, "steps=4", "eval_every=4", "--data-dir", str(corpus), *extra, "--output-dir", str(run)]
    assert train_main(args) == 0
    return run, corpus


@pytest.fixture(scope="module")
def word_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run, save_pretrained folder) of tiny-lm-deq-transformer (word-level vocabulary, tied embeddings, memory)."""
    root = tmp_path_factory.mktemp("word")
    run, _ = _train(root, "tiny-lm-deq-transformer")
    PretrainedLM.from_run(run).save_pretrained(root / "saved")
    return run, root / "saved"


def _logits(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of two consecutive segments, the memory carried from the first to the second."""
    with torch.no_grad():
        first = model(tokens[:, :8])
        return first.logits, model(tokens[:, 8:], first.state).logits


def test_the_saved_folder(word_run: tuple[Path, Path]) -> None:
    run, saved = word_run
    names = sorted(p.name for p in saved.iterdir())
    assert names == ["README.md", "config.json", "model.safetensors", "vocab.txt"]
    config = json.loads((saved / "config.json").read_text())
    run_config = json.loads((run / "config.json").read_text())["config"]
    assert config["architecture"] == "deq_transformer" and config["task"] == "lm"
    assert config["model"] == run_config["model"] and config["deq"] == run_config["deq"]
    assert config["tokenizer"] == {"type": "word", "lower": False}
    training = config["training"]
    assert training["preset"] == "tiny-lm-deq-transformer" and training["step"] == 4
    assert training["config"]["data"]["data_dir"] == "" and training["config"]["optim"] == run_config["optim"]
    _, problem, _, _ = evaluate.load_model(run)
    vocabulary = (saved / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert vocabulary == list(problem.corpus.tokenizer.itos) and len(vocabulary) == config["vocab_size"]


def test_from_pretrained_gives_the_runs_logits_and_test_metrics(word_run: tuple[Path, Path]) -> None:
    run, saved = word_run
    _, problem, reference, _ = evaluate.load_model(run)
    lm = PretrainedLM.from_pretrained(saved)
    assert not lm.training and lm.model.head.weight is lm.model.embed.weight  # tied again on loading
    assert lm.model.body.deq.max_iter == reference.body.deq.max_iter == 15
    tokens = torch.randint(0, problem.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    for got, want in zip(_logits(lm, tokens), _logits(reference, tokens), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    ours = evaluate_split(lm, problem, "test", CPU)
    assert ours == evaluate_split(reference, problem, "test", CPU)
    # The card's test metrics are those the run logged for these weights; evaluated again here in float32 with the
    # same reductions, they agree to float32 rounding.
    (logged,) = [row for row in read_metrics(run / "metrics.jsonl") if row["split"] == "test"]
    assert lm.config["training"]["metrics"]["test"]["loss"] == logged["loss"]
    assert ours["loss"] == pytest.approx(logged["loss"], rel=1e-5) and ours["ppl"] == pytest.approx(
        logged["ppl"], rel=1e-4
    )


def test_the_vocabulary_encodes_the_corpus_ids(word_run: tuple[Path, Path]) -> None:
    run, saved = word_run
    _, problem, _, _ = evaluate.load_model(run)
    lm = PretrainedLM.from_pretrained(saved)
    corpus = Path(json.loads((run / "config.json").read_text())["config"]["data"]["data_dir"])
    test_text = (corpus / "test.txt").read_text()
    assert torch.equal(lm.encode(test_text), problem.corpus.test)  # the whole test split, id for id
    ids = lm.encode(TEXT)
    vocab = problem.corpus.tokenizer
    assert ids.tolist() == [i for line in TEXT.splitlines() for i in vocab.encode_line(line)]
    assert ids.tolist().count(vocab.unk_id) == 1 and ids.tolist().count(vocab.eos_id) == 2
    assert lm.decode(ids) == TEXT.replace("zebra", "<unk>")
    assert lm.encode("the cat", end_line=False).tolist() == vocab.encode_line("the cat")[:-1]


def test_generate_continues_greedily(word_run: tuple[Path, Path]) -> None:
    """generate's tokens are, one after the other, the argmax of the logits of the sequence so far."""
    _, saved = word_run
    lm = PretrainedLM.from_pretrained(saved)
    ids = lm.encode("the cat", end_line=False).tolist()
    for _ in range(3):
        with torch.no_grad():
            ids.append(int(lm(torch.tensor([ids])).logits[0, -1].argmax()))
    assert lm.generate("the cat", max_new_tokens=3) == lm.decode(ids[2:])
    with pytest.raises(HubModelError, match="at least one token"):
        lm.generate("", max_new_tokens=1)


def test_a_sentencepiece_model_travels_with_its_model_file(tmp_path: Path) -> None:
    run, corpus = _train(tmp_path, "tiny-lm-transformer-xl", "--tokenizer", "sentencepiece", "--vocab-size", "24")
    PretrainedLM.from_run(run).save_pretrained(tmp_path / "saved")
    names = sorted(p.name for p in (tmp_path / "saved").iterdir())
    assert names == ["README.md", "config.json", "model.safetensors", "tokenizer.model"]
    lm = PretrainedLM.from_pretrained(tmp_path / "saved")
    _, problem, reference, _ = evaluate.load_model(run)
    assert "deq" not in lm.config and problem.vocab_size == 24
    assert torch.equal(lm.encode((corpus / "valid.txt").read_text()), problem.corpus.valid)
    tokens = problem.corpus.test[:16].reshape(2, 8)
    torch.testing.assert_close(lm(tokens).logits, reference(tokens).logits, rtol=0, atol=0)
    assert evaluate_split(lm, problem, "test", CPU) == evaluate_split(reference, problem, "test", CPU)


def test_a_folder_that_is_not_a_deq_lm_model_is_one_line(word_run: tuple[Path, Path], tmp_path: Path) -> None:
    _, saved = word_run

    def changed(name: str, edit: Any) -> Path:
        folder = tmp_path / name
        shutil.copytree(saved, folder)
        edit(folder)
        return folder

    def config(change: Any) -> Any:
        def edit(folder: Path) -> None:
            data = json.loads((folder / "config.json").read_text())
            change(data)
            (folder / "config.json").write_text(json.dumps(data))

        return edit

    cases = [
        (changed("no-vocab", lambda f: (f / "vocab.txt").unlink()), HubModelError, "has no vocab.txt .its vocabulary."),
        (changed("old", config(lambda c: c.pop("tokenizer"))), HubModelError, "no vocabulary: .*export RUN OUT"),
        (changed("short", lambda f: (f / "vocab.txt").write_text("<eos>\n<unk>\nthe\n")), HubModelError,
         "holds 3 tokens, the model"),
        (changed("timm", lambda f: (f / "config.json").write_text('{"architecture": "resnet18", "num_classes": 10}')),
         HubModelError, "is not a deq-lm model's"),
        (changed("wider", config(lambda c: c["model"].update(d_ff=32))), CheckpointError,
         "does not fit the model that config.json describes"),
    ]  # fmt: skip
    for folder, error, message in cases:
        with pytest.raises(error, match=message) as raised:
            PretrainedLM.from_pretrained(folder)
        assert len(str(raised.value).splitlines()) == 1


def test_export_pushes_to_the_hub_and_the_repo_loads_back(word_run, tmp_path: Path, monkeypatch, capsys) -> None:
    run, _ = word_run
    hub = StandInHub(monkeypatch, tmp_path / "hub")
    out = tmp_path / "out"
    assert export.main([str(run), str(out), "--push-to-hub", "me/tiny-deq-lm"]) == 0
    assert f"pushed to https://hub.invalid/me/tiny-deq-lm/commit/{COMMIT}" in capsys.readouterr().out
    uploaded = hub.uploads["me/tiny-deq-lm"]
    assert uploaded == {p.name: p.read_bytes() for p in out.iterdir()} and hub.calls[1][1]["repo_type"] == "model"
    card = huggingface_hub.ModelCard(uploaded["README.md"].decode())
    assert card.data.library_name == "deq-lm" and card.data.pipeline_tag == "text-generation"
    assert "## Equilibrium solver" in card.text and "| `max_iter` | `15` |" in card.text
    assert "| test | 4 |" in card.text and 'PretrainedLM.from_pretrained("REPO_ID")' in card.text
    hub.offline()
    lm = PretrainedLM.from_pretrained("me/tiny-deq-lm", cache_dir=hub.cache)
    _, _, reference, _ = evaluate.load_model(run)
    tokens = lm.encode(TEXT)[None, :16]
    for got, want in zip(_logits(lm, tokens), _logits(reference, tokens), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_push_that_fails_is_one_line_and_keeps_the_folder(word_run, tmp_path: Path, monkeypatch, capsys) -> None:
    run, _ = word_run
    StandInHub(monkeypatch, tmp_path / "hub")

    def refused(self, repo_id: str, **kwargs: Any) -> None:
        raise huggingface_hub.errors.LocalTokenNotFoundError("Token is required (`token=True`), but no token found.")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", refused)
    out = tmp_path / "out"
    assert export.main([str(run), str(out), "--push-to-hub", "me/tiny-deq-lm"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "pushing to the Hub repo me/tiny-deq-lm failed (LocalTokenNotFoundError: Token is required" in line
    assert (
        f"{out} is written: log in with `hf auth login`, then push it with `hf upload me/tiny-deq-lm {out} .`" in line
    )
    assert (out / "model.safetensors").is_file()
