"""Word-level vocabulary of the DEQ / Transformer-XL language-modeling experiments.

A line is split on whitespace (lowercased first for PTB) and ends with one ``<eos>``. The vocabulary is built from the
training split only, ordered by decreasing frequency (ties in order of first occurrence) after the specials
``<eos>`` (id 0) and ``<unk>`` (id 1), so that the frequency cutoffs of an adaptive softmax are prefixes of the ids.
Words outside the vocabulary map to ``<unk>``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import CorpusError

EOS = "<eos>"
UNK = "<unk>"
SPECIALS = (EOS, UNK)


def split_words(line: str, lower: bool) -> list[str]:
    """The words of one line: whitespace-separated, lowercased first when ``lower``."""
    return (line.lower() if lower else line).split()


@dataclass(frozen=True)
class WordVocab:
    """Word <-> id map. ``itos[i]`` is the word of id i; ``itos[0] == "<eos>"``, ``itos[1] == "<unk>"``."""

    itos: tuple[str, ...]
    lower: bool = False
    stoi: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if tuple(self.itos[: len(SPECIALS)]) != SPECIALS:
            raise CorpusError(f"a word vocabulary must start with {list(SPECIALS)}, got {list(self.itos[:2])}.")
        stoi = {word: i for i, word in enumerate(self.itos)}
        if len(stoi) != len(self.itos):
            raise CorpusError("the word vocabulary has duplicate entries.")
        object.__setattr__(self, "stoi", stoi)

    @property
    def eos_id(self) -> int:
        return 0

    @property
    def unk_id(self) -> int:
        return 1

    def __len__(self) -> int:
        return len(self.itos)

    def encode_line(self, line: str) -> list[int]:
        """Ids of the words of ``line`` (unknown words -> ``<unk>``) followed by ``<eos>``."""
        stoi, unk = self.stoi, self.unk_id
        return [stoi.get(word, unk) for word in split_words(line, self.lower)] + [self.eos_id]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``: words joined by single spaces, each ``<eos>`` ending a line with a newline."""
        lines: list[str] = []
        words: list[str] = []
        for i in ids:
            if i == self.eos_id:
                lines.append(" ".join(words) + "\n")
                words = []
            else:
                words.append(self.itos[i])
        return "".join(lines) + " ".join(words)


def build_vocab(
    lines: Iterable[str],
    lower: bool,
    min_freq: int = 1,
    max_size: int | None = None,
    where: str = "the training text",
) -> WordVocab:
    """Vocabulary of the words in ``lines`` (the training split).

    Args:
        lines: the training text, one line per item.
        lower: lowercase before splitting (PTB).
        min_freq: keep words seen at least this many times (>= 1); the rest become ``<unk>``.
        max_size: keep at most this many words besides the specials (None: all).
        where: what ``lines`` are, for the error messages.

    Returns:
        the vocabulary: specials, then words by decreasing count (ties in order of first occurrence).

    Raises:
        CorpusError: ``lines`` hold no word, or none is seen ``min_freq`` times (the message says what to lower).
    """
    if min_freq < 1:
        raise CorpusError(f"min_freq must be >= 1, got {min_freq}.")
    if max_size is not None and max_size < 1:
        raise CorpusError(f"max_size must be >= 1 or None, got {max_size}.")
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(split_words(line, lower))
    for special in SPECIALS:
        counts.pop(special, None)
    if not counts:
        raise CorpusError(f"{where} contains no words (only blank lines or {EOS} / {UNK}).")
    words = [word for word, n in counts.most_common(max_size) if n >= min_freq]
    if not words:
        top = counts.most_common(1)[0][1]
        raise CorpusError(
            f"min_freq={min_freq} turns every word of {where} into {UNK}: its {len(counts)} distinct words occur at "
            f"most {top} time(s); lower min_freq to {top} or less (min_freq={top})."
        )
    return WordVocab(SPECIALS + tuple(words), lower=lower)
