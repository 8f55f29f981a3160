"""Language modeling end to end: the problem's ordered batches and state carrying, the CLI on a tiny corpus written
here, resume with memory, the pydoc corpus, and the errors for a missing or malformed corpus."""

import json
import math
from pathlib import Path

import pytest
import torch

from conftest import run_module, write_tiny_corpus
from deq_core.train.checkpoints import safe_load
from deq_core.train.metrics import read_metrics
from deq_core.train.run_config import replace_config
from deq_lm.configs import get_config
from deq_lm.data import CorpusError, OrderedLMBatches
from deq_lm.data.pydoc_corpus import paragraphs, pydoc_splits, tokenize_line
from deq_lm.models import build_model
from deq_lm.problems import LanguageModelProblem, build_problem
from deq_lm.train import main, train


@pytest.fixture
def corpus_dir(tmp_path):
    return write_tiny_corpus(tmp_path / "corpus")


def _lm_config(name: str, corpus_dir: Path, **changes):
    """The preset with the corpus folder and ``changes`` (short names: each is in one section only)."""
    return replace_config(get_config(name), {"data.data_dir": str(corpus_dir), **changes})


def test_train_batches_are_ordered_segments_split_over_processes(corpus_dir):
    problem = build_problem(_lm_config("tiny-lm-transformer-xl", corpus_dir))
    assert isinstance(problem, LanguageModelProblem)
    stream = OrderedLMBatches.from_ids(problem.corpus.train, 4, 8, drop_last=True)
    n = problem.segments_per_epoch(4)
    assert n == len(stream) > 2
    for step in (0, 1, n - 1, n, n + 1):
        x, y = problem.train_batch(step, 4)
        assert torch.equal(x, stream[step % n][0]) and torch.equal(y, stream[step % n][1])
        halves = [problem.train_batch(step, 4, rank, 2) for rank in (0, 1)]
        assert torch.equal(torch.cat([h[0] for h in halves]), x)
    assert problem.starts_stream(0, 4) and problem.starts_stream(n, 4) and not problem.starts_stream(1, 4)


def test_the_chance_level_is_the_unigram_perplexity_of_the_training_text(corpus_dir):
    import collections
    import math

    problem = build_problem(_lm_config("tiny-lm-transformer-xl", corpus_dir))
    assert isinstance(problem, LanguageModelProblem)
    train, valid = problem.corpus.split("train").tolist(), problem.corpus.split("valid").tolist()
    counts = collections.Counter(train)
    total = len(train) + problem.vocab_size  # add-one smoothing over the vocabulary
    nll = -sum(math.log((counts[t] + 1) / total) for t in valid) / len(valid)
    text = problem.baseline()
    assert text.startswith(f"ppl {math.exp(nll):.4g} ") and 1 < math.exp(nll) < problem.vocab_size


def test_segmented_evaluation_with_memory_equals_one_pass(corpus_dir, float64):
    """Transformer-XL with memory at least as long as the split's columns: evaluating 8 tokens at a time and carrying
    the memory gives exactly the NLL of one pass over each whole column."""
    cfg = _lm_config("tiny-lm-transformer-xl", corpus_dir, mem_len=400, dropout=0.0)
    torch.manual_seed(0)
    segmented = LanguageModelProblem.from_config(replace_config(cfg, {"data.eval_tgt_len": 8}))
    one_pass = LanguageModelProblem.from_config(replace_config(cfg, {"data.eval_tgt_len": 10_000}))
    model = build_model(cfg, segmented.vocab_size).eval()
    columns = OrderedLMBatches.from_ids(segmented.corpus.valid, 2, 8)
    assert len(columns) > 3 and columns.length <= 400
    a = segmented.evaluate(model, "valid", torch.device("cpu"))
    b = one_pass.evaluate(model, "valid", torch.device("cpu"))
    assert a["ppl"] == pytest.approx(b["ppl"], rel=1e-9)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-9)
    # Without memory the segments lose their context: the NLL changes.
    no_memory = LanguageModelProblem.from_config(replace_config(cfg, {"data.eval_tgt_len": 8}))
    model_no_mem = build_model(replace_config(cfg, {"model.mem_len": 0}), segmented.vocab_size).eval()
    model_no_mem.load_state_dict(model.state_dict())
    c = no_memory.evaluate(model_no_mem, "valid", torch.device("cpu"))
    assert abs(c["loss"] - a["loss"]) > 1e-6


def test_model_nll_is_cross_entropy_of_the_logits(corpus_dir):
    cfg = _lm_config("tiny-lm-deq-transformer", corpus_dir)
    problem = build_problem(cfg)
    model = build_model(cfg, problem.vocab_size)
    x, y = problem.train_batch(0, 4)
    out = model(x, targets=y)
    assert out.nll is not None and out.logits is not None and out.nll.shape == y.shape
    expected = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), y.flatten())
    assert float(out.nll.mean()) == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("config", ["tiny-lm-deq-transformer", "tiny-lm-transformer-xl", "tiny-lm-deq-trellisnet"])
def test_cli_lowers_validation_perplexity_and_writes_metrics(tmp_path, corpus_dir, config):
    out = tmp_path / "run"
    code = main(["--config", config, "--data-dir", str(corpus_dir), "--output-dir", str(out), "steps=80",
                 "eval_every=1000", "grad_accum=2"])  # fmt: skip
    assert code == 0
    records = read_metrics(out / "metrics.jsonl")
    valid = [r for r in records if r["split"] == "valid"]
    train_records = [r for r in records if r["split"] == "train"]
    assert {"step", "split", "loss", "ppl"} <= set(train_records[-1])
    assert valid[-1]["step"] == 80 and valid[-1]["ppl"] == pytest.approx(math.exp(valid[-1]["loss"]), rel=1e-9)
    # an untrained model is close to uniform over the vocabulary; training must beat it clearly
    vocab = build_problem(_lm_config(config, corpus_dir)).vocab_size
    assert valid[-1]["ppl"] < 0.5 * vocab
    assert valid[-1]["ppl"] < train_records[0]["ppl"]
    if "deq" in config:
        assert {"nfe_forward", "nfe_backward", "residual"} <= set(train_records[-1]) and "nfe_forward" in valid[-1]
    test = [r for r in records if r["split"] == "test"]
    assert len(test) == 1 and test[0]["ppl"] < 0.5 * vocab


def test_resume_carries_the_memory_and_gives_the_same_losses(tmp_path, corpus_dir):
    cfg = _lm_config("tiny-lm-deq-transformer", corpus_dir, steps=10, eval_every=5, dropout=0.1, grad_accum=2)
    train(cfg, tmp_path / "full", name="full")
    train(replace_config(cfg, {"run.stop_after": 6}), tmp_path / "cut", name="cut")
    memory = safe_load(tmp_path / "cut" / "checkpoints" / "step_0000006" / "memory_rank0.pt")
    # one memory per micro-batch (its 2 rows): the states and their injections
    assert len(memory) == 2 and memory[0][0].shape == (2, 8, 8) and memory[0][1].shape == (2, 8, 24)
    train(cfg, tmp_path / "cut", name="cut", resume=True)

    def losses(run: Path) -> dict[int, float]:
        return {r["step"]: r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["split"] == "train"}

    a, b = losses(tmp_path / "full"), losses(tmp_path / "cut")
    for step in range(7, 11):
        assert a[step] == pytest.approx(b[step], rel=1e-6, abs=0), step


def test_missing_corpus_is_a_clear_error(tmp_path, capsys):
    argv = ["--config", "tiny-lm-transformer-xl", "--data-dir", str(tmp_path / "nowhere")]
    code = main([*argv, "--output-dir", str(tmp_path / "r")])
    assert code == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "--data-dir" in err


def test_malformed_corpus_is_a_clear_error(tmp_path, corpus_dir):
    (corpus_dir / "valid.txt").write_bytes(b"the cat\n\xff\xfe sat\n")
    proc = run_module("deq_lm.train", "--config", "tiny-lm-transformer-xl", "--data-dir", str(corpus_dir),
                      "--output-dir", str(tmp_path / "r"), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "valid.txt, line 2: not valid UTF-8" in proc.stderr


def test_a_corpus_too_short_for_the_batch_says_what_to_lower(tmp_path):
    folder = write_tiny_corpus(tmp_path / "small", n_train=1)
    with pytest.raises(CorpusError, match="lower batch_size or tgt_len"):
        train(_lm_config("tiny-lm-transformer-xl", folder, batch_size=64, tgt_len=64), tmp_path / "r")


def test_pydoc_corpus_splits_topics_and_tokenizes_punctuation():
    assert tokenize_line("f(x), y...") == "f ( x ) , y ..."
    assert paragraphs("Title\n*****\n\nText | a\n+---+---+\n") == ["Title", "Text | a"]
    splits = pydoc_splits()
    assert len(" ".join(splits["train"]).split()) > 50_000
    assert all(len(" ".join(splits[s]).split()) > 3_000 for s in ("valid", "test"))
    shared = set(splits["valid"]) & set(splits["test"])  # only boilerplate lines (table borders) may repeat
    assert len(shared) < 0.02 * len(splits["valid"]), shared


def test_sentencepiece_flags_reach_the_config(tmp_path, corpus_dir):
    out = tmp_path / "run"
    code = main(["--config", "tiny-lm-transformer-xl", "--data-dir", str(corpus_dir), "--tokenizer", "sentencepiece",
                 "--vocab-size", "20", "--output-dir", str(out), "steps=2"])  # fmt: skip
    assert code == 0
    saved = json.loads((out / "config.json").read_text())["config"]["data"]
    assert (saved["tokenizer"], saved["vocab_size"], saved["data_dir"]) == ("sentencepiece", 20, str(corpus_dir))
    assert list((corpus_dir / ".deq_lm_cache").glob("*-sentencepiece-*.model"))


def test_sentencepiece_without_vocab_size_is_a_config_error(tmp_path, capsys, corpus_dir):
    argv = ["--config", "tiny-lm-transformer-xl", "--data-dir", str(corpus_dir), "--tokenizer", "sentencepiece"]
    code = main([*argv, "--output-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "data.vocab_size must be >= 3 for the sentencepiece tokenizer" in err


def test_pydoc_corpus_written_by_concurrent_processes(tmp_path):
    """Two processes starting at once (accelerate launch) both write the corpus: neither fails, the text is whole."""
    from concurrent.futures import ProcessPoolExecutor

    from deq_lm.data.pydoc_corpus import write_pydoc_corpus

    with ProcessPoolExecutor(2) as pool:
        list(pool.map(write_pydoc_corpus, [tmp_path / "pydoc"] * 4))
    expected = pydoc_splits()
    for split in ("train", "valid", "test"):
        assert (tmp_path / "pydoc" / f"{split}.txt").read_text(encoding="utf-8").splitlines() == expected[split]
    assert sorted(p.name for p in (tmp_path / "pydoc").iterdir()) == ["test.txt", "train.txt", "valid.txt"]
    before = (tmp_path / "pydoc" / "train.txt").stat().st_mtime_ns
    write_pydoc_corpus(tmp_path / "pydoc")  # same text: left alone
    assert (tmp_path / "pydoc" / "train.txt").stat().st_mtime_ns == before
