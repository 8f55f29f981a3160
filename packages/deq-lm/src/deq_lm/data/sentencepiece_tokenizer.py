"""SentencePiece tokenization of a corpus (``--tokenizer sentencepiece --vocab-size N``), trained on the training
split. Ids: 0 SentencePiece's unknown piece, 1 end of line (appended to every line as ``<eos>`` is at word level),
2 the corpus' own ``<unk>`` word kept as one piece, then the learned pieces."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import sentencepiece as spm

from deq_core.train.files import write_bytes

from .errors import CorpusError, CorpusNotFoundError
from .vocab import UNK

# SentencePiece samples this many training lines at most (WikiText-103 has 1.8M lines).
MAX_TRAINING_LINES = 2_000_000


@dataclass(frozen=True)
class SentencePieceTokenizer:
    """A trained SentencePiece model (``model_file``) applied line by line; ``lower`` lowercases first (PTB).

    Raises:
        CorpusNotFoundError: no such file.
        CorpusError: the file is not a SentencePiece model (one line naming it).
    """

    model_file: Path
    lower: bool = False
    processor: spm.SentencePieceProcessor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not Path(self.model_file).is_file():
            raise CorpusNotFoundError(f"SentencePiece model file {self.model_file} does not exist.")
        try:
            processor = spm.SentencePieceProcessor(model_file=str(self.model_file))
        except (RuntimeError, OSError) as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise CorpusError(
                f"{self.model_file} is not a SentencePiece model ({reason}); the file was modified or damaged: delete "
                "it, and it is trained again from the training text (with pieces that may differ from the lost ones)."
            ) from None
        object.__setattr__(self, "processor", processor)

    @property
    def eos_id(self) -> int:
        return int(self.processor.eos_id())

    @property
    def unk_id(self) -> int:
        return int(self.processor.unk_id())

    def __len__(self) -> int:
        return int(self.processor.get_piece_size())

    def encode_line(self, line: str) -> list[int]:
        """Piece ids of ``line`` followed by the end-of-line id."""
        return list(self.processor.encode(line.lower() if self.lower else line)) + [self.eos_id]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, each end-of-line id ending a line (whitespace as normalized by SentencePiece)."""
        eos = self.eos_id
        lines: list[str] = []
        piece_ids: list[int] = []
        for i in ids:
            if i == eos:
                lines.append(self.processor.decode(piece_ids) + "\n")
                piece_ids = []
            else:
                piece_ids.append(int(i))
        return "".join(lines) + (self.processor.decode(piece_ids) if piece_ids else "")


def _nonblank(lines: Iterable[str], lower: bool) -> Iterator[str]:
    for line in lines:
        line = line.strip()
        if line:
            yield line.lower() if lower else line


def train_sentencepiece(
    lines: Iterable[str], vocab_size: int, model_file: Path, lower: bool, model_type: str = "unigram"
) -> SentencePieceTokenizer:
    """Train a SentencePiece model of ``vocab_size`` pieces on ``lines`` (the training split) and save it.

    Args:
        lines: the training text, one line per item (blank lines are skipped).
        vocab_size: number of pieces, ids included (>= 4).
        model_file: where to write the model (written atomically).
        lower: lowercase the text before training and encoding (PTB).
        model_type: "unigram" or "bpe".

    Raises:
        CorpusError: ``vocab_size`` too small, or too large for the training text.
    """
    if vocab_size < 4:
        raise CorpusError(f"the SentencePiece vocab_size must be >= 4, got {vocab_size}.")
    if model_type not in ("unigram", "bpe"):
        raise CorpusError(f"SentencePiece model_type must be 'unigram' or 'bpe', got {model_type!r}.")
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_nonblank(lines, lower), model_writer=buffer, vocab_size=vocab_size,
            model_type=model_type, character_coverage=1.0, unk_id=0, eos_id=1, bos_id=-1, pad_id=-1,
            unk_piece="<spm-unk>", user_defined_symbols=[UNK], input_sentence_size=MAX_TRAINING_LINES,
            shuffle_input_sentence=True, num_threads=1, minloglevel=2,
        )  # fmt: skip
    except RuntimeError as error:
        raise CorpusError(f"SentencePiece training failed (vocab_size={vocab_size}): {error}") from error
    model_file = Path(model_file)
    write_bytes(model_file, buffer.getvalue(), option="data.cache_dir")  # aside and renamed: never seen half-written
    return SentencePieceTokenizer(model_file, lower=lower)
