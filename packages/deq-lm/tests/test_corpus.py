"""The corpus data layer: sources (local directory, Hugging Face cache), word-level and SentencePiece tokenization
with the on-disk cache, ordered LM batches and perplexity. Every corpus is written by the test itself; nothing is
downloaded (the Hugging Face path is tested offline with the "text" builder and with a dataset that is not cached;
test_data_download.py tests the online path with a recorded ``datasets.load_dataset``)."""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

import pytest
import torch

from deq_lm.data import (
    EOS,
    UNK,
    CorpusError,
    CorpusNotFoundError,
    HFSource,
    OrderedLMBatches,
    TextDirSource,
    WordVocab,
    batchify,
    build_vocab,
    corpus_source,
    hf_offline,
    load_corpus,
    load_hf_source,
    perplexity,
)
from deq_lm.data import corpus as corpus_module

TRAIN = """ the cat sat on the mat
 The dog sat on the log

 a cat and a dog saw the mat
"""
VALID = " the cat saw a zebra\n the dog sat\n"
TEST = " a mat on the log\n the owl flew\n"


def write_corpus(root: Path, train: str = TRAIN, valid: str = VALID, test: str = TEST) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (root / f"{name}.txt").write_text(text, encoding="utf-8")
    return root


def normalized(text: str, lower: bool = False) -> str:
    """The text as word-level decoding gives it back: single spaces, one newline per line."""
    return "".join(" ".join((line.lower() if lower else line).split()) + "\n" for line in text.splitlines())


# --- word-level vocabulary -------------------------------------------------------------------------------------------


def test_vocab_order_and_specials():
    vocab = build_vocab(TRAIN.splitlines(), lower=False)
    assert vocab.itos[:2] == (EOS, UNK) and (vocab.eos_id, vocab.unk_id) == (0, 1)
    assert vocab.itos[2] == "the"  # most frequent word first (adaptive-softmax cutoffs are id prefixes)
    counts = [sum(line.split().count(w) for line in TRAIN.splitlines()) for w in vocab.itos[2:]]
    assert counts == sorted(counts, reverse=True)
    assert "The" in vocab.stoi and "zebra" not in vocab.stoi


def test_word_round_trip(tmp_path):
    corpus = load_corpus(TextDirSource(write_corpus(tmp_path / "c")), tmp_path / "cache")
    assert corpus.train.dtype == torch.int64 and corpus.train.dim() == 1
    assert corpus.tokenizer.decode(corpus.train.tolist()) == normalized(TRAIN)
    assert corpus.tokenizer.decode(corpus.tokenizer.encode_line(" the  cat\tsat ")) == "the cat sat\n"
    n_words = sum(len(line.split()) for line in TRAIN.splitlines())
    assert corpus.train.numel() == n_words + len(TRAIN.splitlines())  # one <eos> per line, blank lines included
    assert (corpus.train == corpus.tokenizer.eos_id).sum() == len(TRAIN.splitlines())


def test_unknown_words_map_to_unk(tmp_path):
    corpus = load_corpus(TextDirSource(write_corpus(tmp_path / "c")), tmp_path / "cache")
    vocab = corpus.tokenizer
    assert isinstance(vocab, WordVocab)
    assert vocab.encode_line("the zebra")[1] == vocab.unk_id
    assert corpus.tokenizer.decode(corpus.valid.tolist()) == "the cat saw a <unk>\nthe dog sat\n"
    assert corpus.tokenizer.decode(corpus.test.tolist()) == "a mat on the log\nthe <unk> <unk>\n"
    assert corpus.vocab_size == len(set(TRAIN.split())) + 2  # vocabulary from the training split only


def test_min_freq_and_vocab_size_limit(tmp_path):
    source = TextDirSource(write_corpus(tmp_path / "c"))
    rare = load_corpus(source, tmp_path / "cache", min_freq=2)
    assert set(rare.tokenizer.itos[2:]) == {"the", "cat", "sat", "on", "mat", "dog", "a"}
    small = load_corpus(source, tmp_path / "cache", vocab_size=4)
    assert small.tokenizer.itos == (EOS, UNK, "the", "cat")


def test_ptb_is_lowercased(tmp_path):
    data_dir = write_corpus(tmp_path / "c")
    ptb = load_corpus(corpus_source("ptb", data_dir=data_dir), tmp_path / "cache")
    assert "The" not in ptb.tokenizer.itos and ptb.tokenizer.decode(ptb.train.tolist()) == normalized(TRAIN, True)
    assert ptb.tokenizer.encode_line("THE Cat") == ptb.tokenizer.encode_line("the cat")
    wt = load_corpus(corpus_source("wikitext-103", data_dir=data_dir), tmp_path / "cache")
    assert "The" in wt.tokenizer.itos  # WikiText keeps its case
    assert ptb.cache_file != wt.cache_file


# --- ordered batches and perplexity ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "batch_size", "tgt_len"), [(101, 4, 7), (50, 1, 49), (37, 3, 5), (64, 7, 100)])
def test_segments_shift_by_one_and_cover_the_split_once_in_order(n, batch_size, tgt_len):
    ids = torch.arange(1000, 1000 + n)
    batches = OrderedLMBatches.from_ids(ids, batch_size, tgt_len)
    length = (n - 1) // batch_size
    inputs, targets = zip(*batches)
    assert all(x.shape == y.shape and x.shape[0] == batch_size for x, y in batches)
    assert all(x.shape[1] == tgt_len for x in inputs[:-1]) and 1 <= inputs[-1].shape[1] <= tgt_len
    columns_in, columns_tgt = torch.cat(inputs, dim=1), torch.cat(targets, dim=1)
    assert torch.equal(columns_tgt[:, :-1], columns_in[:, 1:])  # shifted by one, also across segment boundaries
    assert torch.equal(columns_tgt.reshape(-1), ids[1 : 1 + batch_size * length])  # every target once, in order
    assert torch.equal(columns_in.reshape(-1), ids[: batch_size * length])
    assert batches.n_targets == batch_size * length == sum(y.numel() for y in targets)
    assert torch.equal(batches[len(batches) - 1][0], inputs[-1])


def test_drop_last_keeps_full_segments_only():
    batches = OrderedLMBatches.from_ids(torch.arange(101), 4, 7, drop_last=True)  # 25 targets per column
    assert len(batches) == 3 and all(x.shape == (4, 7) for x, _ in batches)
    assert batches.n_targets == 4 * 21
    with pytest.raises(IndexError):
        batches[3]


def test_batching_errors():
    with pytest.raises(ValueError, match="too short"):
        batchify(torch.arange(4), 4)
    with pytest.raises(ValueError, match="1-D"):
        batchify(torch.zeros(2, 5, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="tgt_len"):
        OrderedLMBatches.from_ids(torch.arange(10), 2, 0)


def test_perplexity_is_exp_of_mean_token_nll():
    vocab, n = 13, 40
    logits, targets = torch.zeros(n, vocab), torch.randint(0, vocab, (n,))
    nll = float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
    assert perplexity(nll, n) == pytest.approx(vocab)  # uniform prediction: perplexity = vocabulary size
    assert perplexity(0.0, 5) == 1.0 and perplexity(2.0 * 3, 3) == pytest.approx(math.e**2)
    assert perplexity(1e6, 1) == math.inf
    with pytest.raises(ValueError):
        perplexity(1.0, 0)


# --- cache -----------------------------------------------------------------------------------------------------------


def test_cache_is_reused_and_invalidated_by_new_text(tmp_path, monkeypatch):
    data_dir = write_corpus(tmp_path / "c")
    first = load_corpus(TextDirSource(data_dir), tmp_path / "cache")
    assert not first.from_cache and first.cache_file.is_file()

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("the cached corpus was tokenized again")

    with monkeypatch.context() as patch:
        patch.setattr(corpus_module, "encode_split", no_tokenizing)
        patch.setattr(corpus_module, "build_vocab", no_tokenizing)
        second = load_corpus(TextDirSource(data_dir), tmp_path / "cache")
    assert second.from_cache and second.cache_file == first.cache_file
    for split in ("train", "valid", "test"):
        assert torch.equal(second.split(split), first.split(split))
    assert second.tokenizer.itos == first.tokenizer.itos

    (data_dir / "valid.txt").write_text(VALID + " the cat\n", encoding="utf-8")  # new text: new key, tokenized again
    third = load_corpus(TextDirSource(data_dir), tmp_path / "cache")
    assert not third.from_cache and third.cache_file != first.cache_file
    assert third.valid.numel() == first.valid.numel() + 3


def test_unreadable_cache_is_rebuilt(tmp_path):
    data_dir = write_corpus(tmp_path / "c")
    first = load_corpus(TextDirSource(data_dir), tmp_path / "cache")
    first.cache_file.write_bytes(b"not a torch file")
    again = load_corpus(TextDirSource(data_dir), tmp_path / "cache")
    assert not again.from_cache and torch.equal(again.train, first.train)


# --- SentencePiece ---------------------------------------------------------------------------------------------------

SP_TRAIN = "".join(
    f" the {a} {b} sat on the {c} near {d}\n"
    for a in ("cat", "dog", "owl", "fox")
    for b in ("quickly", "slowly", "lazily")
    for c in ("mat", "log", "rug")
    for d in ("home", "there", "Paris")
)


def test_sentencepiece_round_trip_and_cached_model(tmp_path, monkeypatch):
    data_dir = write_corpus(tmp_path / "c", train=SP_TRAIN, valid=" the fox sat on the rug\n\n", test=" an owl\n")
    corpus = load_corpus(TextDirSource(data_dir), tmp_path / "cache", tokenizer="sentencepiece", vocab_size=30)
    tok = corpus.tokenizer
    assert len(tok) == corpus.vocab_size == 30
    assert int(corpus.train.max()) < 30 and int(corpus.train.min()) >= 0
    assert tok.decode(corpus.train.tolist()) == SP_TRAIN.replace("\n ", "\n").lstrip()
    assert tok.decode(corpus.valid.tolist()) == "the fox sat on the rug\n\n"
    assert (corpus.valid == tok.eos_id).sum() == 2  # one end-of-line per line
    assert list((tmp_path / "cache").glob("*.model"))

    def no_training(*args, **kwargs):
        raise AssertionError("the cached SentencePiece model was trained again")

    with monkeypatch.context() as patch:
        patch.setattr(corpus_module, "train_sentencepiece", no_training)
        patch.setattr(corpus_module, "encode_split", no_training)
        again = load_corpus(TextDirSource(data_dir), tmp_path / "cache", tokenizer="sentencepiece", vocab_size=30)
    assert again.from_cache and torch.equal(again.test, corpus.test)

    ptb = load_corpus(
        corpus_source("ptb", data_dir=data_dir), tmp_path / "cache", tokenizer="sentencepiece", vocab_size=30
    )
    assert "Paris" not in ptb.tokenizer.decode(ptb.train.tolist()) and ptb.cache_file != corpus.cache_file


def test_sentencepiece_options_are_checked(tmp_path):
    source = TextDirSource(write_corpus(tmp_path / "c"))
    with pytest.raises(CorpusError, match="vocab_size"):
        load_corpus(source, tmp_path / "cache", tokenizer="sentencepiece")
    with pytest.raises(CorpusError, match="Vocabulary size too high"):
        load_corpus(source, tmp_path / "cache", tokenizer="sentencepiece", vocab_size=5000)
    with pytest.raises(CorpusError, match="tokenizer must be one of"):
        load_corpus(source, tmp_path / "cache", tokenizer="bytes")  # type: ignore[arg-type]


# --- missing or malformed corpora ------------------------------------------------------------------------------------


def test_missing_corpus_says_how_to_get_it(tmp_path):
    with pytest.raises(CorpusNotFoundError, match="does not exist.*--data-dir"):
        TextDirSource(tmp_path / "nowhere")
    data_dir = write_corpus(tmp_path / "c")
    (data_dir / "valid.txt").unlink()
    with pytest.raises(CorpusNotFoundError, match=r"lacks valid\.txt.*train\.txt, valid\.txt and test\.txt"):
        corpus_source("ptb", data_dir=data_dir)


def test_empty_or_blank_train_split(tmp_path):
    with pytest.raises(CorpusError, match=r"train\.txt.*empty"):
        TextDirSource(write_corpus(tmp_path / "empty", train=""))
    blank = TextDirSource(write_corpus(tmp_path / "blank", train="\n  \n\n"))
    with pytest.raises(CorpusError, match="contains no words"):
        load_corpus(blank, tmp_path / "cache")
    blank_test = TextDirSource(write_corpus(tmp_path / "blank-test", test="\n\n"))
    with pytest.raises(CorpusError, match="test split .* contains no text"):
        load_corpus(blank_test, tmp_path / "cache")


def test_non_utf8_bytes_name_the_file_and_line(tmp_path):
    data_dir = write_corpus(tmp_path / "c")
    (data_dir / "valid.txt").write_bytes(b" the cat\n the \xff\xfe dog\n")
    with pytest.raises(CorpusError, match=r"valid\.txt, line 2: not valid UTF-8"):
        load_corpus(TextDirSource(data_dir), tmp_path / "cache")


def test_byte_order_mark_and_crlf_are_ignored(tmp_path):
    data_dir = write_corpus(tmp_path / "c")
    (data_dir / "test.txt").write_bytes("\ufeff the log\r\n the cat\r\n".encode())
    corpus = load_corpus(TextDirSource(data_dir), tmp_path / "cache")
    assert corpus.tokenizer.decode(corpus.test.tolist()) == "the log\nthe cat\n"


# --- Hugging Face datasets -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["--offline", "HF_HUB_OFFLINE=1"])
@pytest.mark.parametrize("name", ["ptb", "wikitext-103"])
def test_uncached_hf_dataset_fails_at_once_with_instructions(tmp_path, name, how, monkeypatch):
    """Offline (asked for: the real ``datasets`` would otherwise try the network, ~25 s here)."""
    if how == "HF_HUB_OFFLINE=1":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # after ``datasets`` is imported: load_hf_source applies it
    before = os.environ.get("HF_HUB_OFFLINE")
    attempts: list[object] = []  # offline mode: no network lookups or connections, so no retries

    def no_network(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network access in a test")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    with pytest.raises(CorpusNotFoundError) as error:
        load_hf_source(name, cache_dir=tmp_path / "hf", offline=how == "--offline")
    assert attempts == []
    message = str(error.value)
    assert "not in the local Hugging Face cache" in message and "--data-dir" in message and "HF_HOME" in message
    assert os.environ.get("HF_HUB_OFFLINE") == before  # offline mode is restored afterwards
    with pytest.raises(CorpusError, match="unknown corpus"):
        load_hf_source("enwik9")


def test_hf_dataset_gives_the_same_corpus_as_the_directory(tmp_path):
    import datasets

    data_dir = write_corpus(tmp_path / "c")
    files = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}
    with hf_offline():
        dataset = datasets.load_dataset(
            "text", data_files={k: str(data_dir / v) for k, v in files.items()}, cache_dir=str(tmp_path / "hf")
        )
    source = HFSource(dataset, text_column="text", label="tiny", lower=True)
    assert list(source.lines("valid")) == VALID.splitlines()
    from_hf = load_corpus(source, tmp_path / "cache")
    from_dir = load_corpus(TextDirSource(data_dir, lower=True), tmp_path / "cache")
    assert from_hf.tokenizer.itos == from_dir.tokenizer.itos
    for split in ("train", "valid", "test"):
        assert torch.equal(from_hf.split(split), from_dir.split(split))
    assert load_corpus(HFSource(dataset, "text", label="tiny", lower=True), tmp_path / "cache").from_cache
    with pytest.raises(CorpusError, match="no column 'sentence'"):
        HFSource(dataset, text_column="sentence", label="tiny")
    with pytest.raises(CorpusError, match="no valid split"):
        HFSource(datasets.DatasetDict(train=dataset["train"], test=dataset["test"]), "text", label="tiny")
