"""Bad corpora get one clear line before any training step (CorpusError; the CLI exits with 2): splits too short for
one batch, a min_freq that removes every word. The <unk> share of each split is reported at startup, in the
evaluation records and by evaluate, with a warning when it is high; the startup line names the text actually read;
the progress bar draws only on a terminal and honours TQDM_DISABLE."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest
import torch

from conftest import subprocess_env, write_tiny_corpus
from deq_core.train.metrics import read_metrics
from deq_lm.evaluate import main as evaluate_main
from deq_lm.problems import UNK_WARNING_RATE
from deq_lm.train import main

PREFIX = "python -m deq_lm.train: error: "


def _fails_before_training(capsys: pytest.CaptureFixture[str], out: Path, *args: str) -> str:
    """Run the CLI expecting exit 2 before the first step; return its one-line error."""
    code = main(["--config", "tiny-lm-transformer-xl", "--output-dir", str(out), *args])
    assert code == 2
    stdout, err = capsys.readouterr()
    assert err.startswith(PREFIX) and err.count("\n") == 1, err
    assert "parameters" not in stdout and not (out / "metrics.jsonl").exists()
    return err[len(PREFIX) :]


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_a_split_too_short_for_one_batch_is_one_line_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], split: str
) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus")
    (corpus / f"{split}.txt").write_text("cat\n")  # 2 tokens: "cat <eos>"
    err = _fails_before_training(capsys, tmp_path / "run", "--data-dir", str(corpus), "eval_every=2")
    assert f"the {split} split of text in {corpus}" in err and "has 2 tokens" in err, err
    if split == "train":
        assert "batch_size=4 columns x tgt_len=8 (it needs at least 33): lower batch_size or tgt_len" in err
    else:
        assert "eval_batch_size=2 columns (it needs at least 3): lower eval_batch_size to 1 or less" in err


@pytest.mark.parametrize(
    ("tokenizer", "damage", "expected"),
    [
        (["--tokenizer", "word"], "ids", "its train split holds ids from 0 to 10000, outside the vocabulary's 0 .. "),
        (["--tokenizer", "sentencepiece", "--vocab-size", "24"], "model", ".model is not a SentencePiece model ("),
    ],
)
def test_a_damaged_corpus_cache_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tokenizer: list[str], damage: str, expected: str
) -> None:
    """Token ids beyond the vocabulary in the cached splits, a SentencePiece model that is not one: one line naming
    the file, which deleting rebuilds."""
    corpus = write_tiny_corpus(tmp_path / "corpus")
    args = ["--data-dir", str(corpus), *tokenizer, "steps=1"]
    assert main(["--config", "tiny-lm-transformer-xl", "--output-dir", str(tmp_path / "first"), *args]) == 0
    cache = corpus / ".deq_lm_cache"
    if damage == "ids":
        (path,) = cache.glob("*.pt")
        saved = torch.load(path, weights_only=True)
        saved["train"][::3] = 10_000
        torch.save(saved, path)
    else:
        (path,) = cache.glob("*.model")
        path.write_bytes(b"not a model")
    capsys.readouterr()
    err = _fails_before_training(capsys, tmp_path / "run", *args)
    assert err.startswith(("corpus cache ", str(path))) and str(path) in err and expected in err, err
    assert err.rstrip().endswith("delete it, and it is built again from the text.") or "trained again" in err, err


def test_min_freq_that_removes_every_word_says_what_to_lower(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus")
    lines = [" ".join(f"w{i}_{j}" for j in range(20)) for i in range(3)]
    (corpus / "train.txt").write_text("\n".join(lines * 3) + "\n")  # 60 distinct words, each 3 times
    err = _fails_before_training(capsys, tmp_path / "run", "--data-dir", str(corpus), "min_freq=4")
    assert "min_freq=4 turns every word of the training split of 'corpus' into <unk>" in err, err
    assert "occur at most 3 time(s); lower min_freq to 3 or less" in err


def test_unk_share_is_reported_and_a_high_one_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus")
    # test: 4 unseen words + <eos> per line and 1 known word: 4 of 6 tokens are <unk>
    (corpus / "test.txt").write_text("zebra quagga okapi gnu cat\n" * 30)
    out = tmp_path / "run"
    assert main(["--config", "tiny-lm-transformer-xl", "--data-dir", str(corpus), "--output-dir", str(out),
                 "steps=2", "eval_every=2"]) == 0  # fmt: skip
    stdout, err = capsys.readouterr()
    startup = stdout.splitlines()[0]
    assert "<unk> train 0.00% / valid 0.00% / test 66.67%" in startup, startup
    warnings = [line for line in err.splitlines() if line.startswith("WARNING: ")]
    assert len(warnings) == 1 and "66.7% of the test split's tokens are <unk>" in warnings[0], err
    records = read_metrics(out / "metrics.jsonl")
    by_split = {r["split"]: r for r in records if r["split"] in ("valid", "test")}
    assert by_split["valid"]["unk_rate"] == 0.0
    assert by_split["test"]["unk_rate"] == pytest.approx(4 / 6, rel=1e-12) and 4 / 6 > UNK_WARNING_RATE
    assert evaluate_main(["--checkpoint", str(out), "--no-sweep"]) == 0
    stdout, err = capsys.readouterr()
    assert "unk_rate 0.6667" in stdout and "WARNING: 66.7% of the test split's tokens are <unk>" in err


def test_startup_line_names_the_text_actually_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_tiny_corpus(tmp_path / "mine")
    out = tmp_path / "run"
    # corpus=ptb as in the ptb-* presets: the text is the directory's, lowercased as PTB is
    assert main(["--config", "tiny-ptb-deq-trellisnet", "--data-dir", str(corpus), "--output-dir", str(out),
                 "corpus=ptb", "steps=1", "eval_every=1"]) == 0  # fmt: skip
    startup = capsys.readouterr().out.splitlines()[0]
    assert f"language modeling on text in {corpus}, lowercased as corpus=ptb asks, word vocabulary of" in startup
    assert "on ptb" not in startup, startup


def _train_with_stderr(tmp_path: Path, stderr: int, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in subprocess_env().items() if k != "TQDM_DISABLE"}
    environment.update(env)
    call = [sys.executable, "-m", "deq_lm.train", "--config", "tiny-lstm", "--output-dir", str(tmp_path / "r"),
            "steps=6", "eval_every=3"]  # fmt: skip
    return subprocess.run(call, env=environment, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300)


def test_no_progress_bar_redraws_in_a_log_file(tmp_path: Path) -> None:
    proc = _train_with_stderr(tmp_path, subprocess.PIPE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr and "it/s" not in proc.stderr, proc.stderr[-500:]
    assert "step 3: valid" in proc.stdout and "step 6: valid" in proc.stdout  # the evaluation lines remain


def _stderr_on_a_terminal(tmp_path: Path, **env: str) -> str:
    """Run a tiny training with stderr on a pseudo-terminal (100 columns); return what it wrote there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:  # read while the run writes, so that it never blocks on a full terminal buffer
        with contextlib.suppress(OSError):  # EIO once the run has closed the terminal
            while data := os.read(leader, 4096):
                chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = _train_with_stderr(tmp_path, follower, **env)
    finally:
        os.close(follower)
        reader.join(timeout=30)
        os.close(leader)
    assert proc.returncode == 0, proc.stdout[-2000:]
    return b"".join(chunks).decode(errors="replace")


def test_progress_bar_on_a_terminal_unless_tqdm_disable(tmp_path: Path) -> None:
    assert "it/s" in _stderr_on_a_terminal(tmp_path / "a")
    assert "it/s" not in _stderr_on_a_terminal(tmp_path / "b", TQDM_DISABLE="1")
