"""Tokenize a corpus once and cache the encoded splits on disk.

``load_corpus(source, cache_dir)`` encodes the train, valid and test splits of a ``CorpusSource`` with a word-level
vocabulary (built from the training split) or a SentencePiece model (trained on it). The result is saved to
``cache_dir/<label>-<tokenizer>-<key>.pt``, where the key hashes the source's fingerprint and the options, and is
loaded from there by the next call with the same text and options.
"""

from __future__ import annotations

import array
import hashlib
import json
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import torch
from torch import Tensor

from deq_core.train.files import write_file

from .errors import CorpusError
from .sentencepiece_tokenizer import SentencePieceTokenizer, train_sentencepiece
from .sources import SPLITS, CorpusSource, check_split
from .vocab import WordVocab, build_vocab

CACHE_VERSION = 1
TOKENIZERS = ("word", "sentencepiece")


class Tokenizer(Protocol):
    """Maps a line of text to ids ending with ``eos_id``, and ids back to text."""

    @property
    def eos_id(self) -> int: ...

    @property
    def unk_id(self) -> int: ...

    def __len__(self) -> int: ...

    def encode_line(self, line: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


@dataclass(frozen=True)
class Corpus:
    """The encoded splits: 1-D int64 tensors of token ids in corpus order, one end-of-line id after every line."""

    train: Tensor  # (N_train,)
    valid: Tensor  # (N_valid,)
    test: Tensor  # (N_test,)
    tokenizer: Tokenizer
    cache_file: Path
    from_cache: bool  # True when the splits were read from cache_file rather than tokenized

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def split(self, name: str) -> Tensor:
        """The ids of split ``name`` ("train", "valid", "test")."""
        check_split(name)
        return getattr(self, name)

    def unk_rate(self, name: str) -> float:
        """Fraction of the tokens of split ``name`` (words and end-of-line ids) that are the tokenizer's unknown
        token: at word level, the words missing from the training vocabulary (and the corpus' own ``<unk>``)."""
        ids = self.split(name)
        return float((ids == self.tokenizer.unk_id).sum()) / max(ids.numel(), 1)


def encode_split(lines: Iterable[str], tokenizer: Tokenizer, where: str) -> Tensor:
    """Encode ``lines`` into one 1-D int64 tensor (each line's ids, then the end-of-line id).

    Raises:
        CorpusError: the lines hold no text (only blank lines); ``where`` names them in the message.
    """
    ids = array.array("q")
    n_text_lines = 0
    for line in lines:
        encoded = tokenizer.encode_line(line)
        n_text_lines += len(encoded) > 1
        ids.extend(encoded)
    if n_text_lines == 0:
        raise CorpusError(f"{where} contains no text (only blank lines).")
    return torch.frombuffer(bytearray(ids.tobytes()), dtype=torch.int64)


def cache_key(source: CorpusSource, tokenizer: str, options: dict[str, int | str | None]) -> str:
    """Hex digest of everything the encoded splits depend on: the text, lowercasing, the tokenizer and its options."""
    spec = {"version": CACHE_VERSION, "text": source.fingerprint(), "lower": source.lower, "tokenizer": tokenizer}
    spec.update(options)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def _read_cache(cache_file: Path, tokenizer: Tokenizer | None, lower: bool) -> Corpus | None:
    """The corpus saved in ``cache_file``, or None when it is missing or unreadable (then it is rebuilt).

    Raises:
        CorpusError: a split that is not a 1-D tensor of ids of the tokenizer (0 .. size - 1): the file was modified
            or damaged, and ids outside the embedding would fail deep inside the model.
    """
    if not cache_file.is_file():
        return None
    try:
        saved = torch.load(cache_file, map_location="cpu", weights_only=True)
        if tokenizer is None:
            tokenizer = WordVocab(tuple(saved["itos"]), lower=lower)
        splits = {split: saved[split] for split in SPLITS}
    except (OSError, RuntimeError, KeyError, TypeError, EOFError, ValueError, pickle.UnpicklingError):
        return None
    size = len(tokenizer)
    for split, ids in splits.items():
        if not isinstance(ids, Tensor) or ids.dtype != torch.int64 or ids.ndim != 1:
            what = f"is not a 1-D int64 tensor ({type(ids).__name__})"
        elif ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < size):
            what = f"holds ids from {int(ids.min())} to {int(ids.max())}, outside the vocabulary's 0 .. {size - 1}"
        else:
            continue
        raise CorpusError(
            f"corpus cache {cache_file}: its {split} split {what}; the file was modified or damaged: delete it, and "
            "it is built again from the text."
        )
    return Corpus(**splits, tokenizer=tokenizer, cache_file=cache_file, from_cache=True)


def _write_cache(cache_file: Path, payload: dict[str, object]) -> None:
    write_file(cache_file, lambda tmp: torch.save(payload, tmp), option="data.cache_dir")  # aside and renamed


def load_corpus(
    source: CorpusSource,
    cache_dir: Path,
    tokenizer: Literal["word", "sentencepiece"] = "word",
    vocab_size: int | None = None,
    min_freq: int = 1,
) -> Corpus:
    """Encode the splits of ``source`` (or load them from the cache made by an earlier call).

    Args:
        source: a ``TextDirSource`` or ``HFSource`` (``deq_lm.data.corpus_source`` picks one).
        cache_dir: directory of the encoded splits (``.pt``) and SentencePiece models (``.model``); created if needed.
        tokenizer: "word" (vocabulary of the training split, ``<unk>`` for the rest) or "sentencepiece".
        vocab_size: SentencePiece: number of pieces (required). Word level: keep the ``vocab_size - 2`` most
            frequent words besides ``<eos>``, ``<unk>`` (None: every word of the training split).
        min_freq: word level: words seen fewer times in the training split become ``<unk>``.

    Returns:
        the ``Corpus``; ``from_cache`` tells whether it was read from ``cache_file``.

    Raises:
        CorpusError: empty split, text that is not UTF-8, invalid options, a cache file or SentencePiece model of
            the cache that was modified or damaged; CorpusNotFoundError: missing files.
    """
    if tokenizer not in TOKENIZERS:
        raise CorpusError(f"tokenizer must be one of {list(TOKENIZERS)}, got {tokenizer!r}.")
    if tokenizer == "sentencepiece" and vocab_size is None:
        raise CorpusError("the sentencepiece tokenizer needs a vocab_size (--vocab-size N).")
    if tokenizer == "word" and vocab_size is not None and vocab_size < 3:
        raise CorpusError(f"a word vocab_size must be >= 3 (<eos>, <unk> and one word), got {vocab_size}.")
    word_min_freq = min_freq if tokenizer == "word" else 1
    options: dict[str, int | str | None] = {"vocab_size": vocab_size, "min_freq": word_min_freq}
    key = cache_key(source, tokenizer, options)
    cache_dir = Path(cache_dir)
    cache_file = cache_dir / f"{source.label}-{tokenizer}-{key}.pt"
    model_file = cache_dir / f"{source.label}-sentencepiece-{key}.model"

    tok: Tokenizer | None = None
    if tokenizer == "sentencepiece" and model_file.is_file():
        tok = SentencePieceTokenizer(model_file, lower=source.lower)
    if tokenizer == "word" or tok is not None:
        cached = _read_cache(cache_file, tok, source.lower)
        if cached is not None:
            return cached

    if tokenizer == "word":
        max_size = None if vocab_size is None else vocab_size - 2
        where = f"the training split of {source.label!r}"
        tok = build_vocab(source.lines("train"), lower=source.lower, min_freq=min_freq, max_size=max_size, where=where)
    elif tok is None:
        assert vocab_size is not None
        tok = train_sentencepiece(source.lines("train"), vocab_size, model_file, lower=source.lower)
    splits = {s: encode_split(source.lines(s), tok, f"the {s} split of {source.label!r}") for s in SPLITS}
    payload: dict[str, object] = dict(splits)
    if isinstance(tok, WordVocab):
        payload["itos"] = list(tok.itos)
    _write_cache(cache_file, payload)
    return Corpus(**splits, tokenizer=tok, cache_file=cache_file, from_cache=False)
