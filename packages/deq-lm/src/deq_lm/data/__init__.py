"""Data for deq-lm tasks: the copy-memory generator and the word-level corpora (PTB, WikiText-103, local text).

Corpora: ``corpus_source`` finds the text (a directory with train/valid/test.txt or the splits in another form
``datasets`` reads, or a Hugging Face dataset),
``load_corpus`` tokenizes it (word level or SentencePiece) with an on-disk cache, ``OrderedLMBatches`` cuts a split
into ordered segments and ``perplexity`` turns summed NLL into perplexity.
"""

from .copy_memory import (
    COPY_LEN,
    MARKER,
    N_SYMBOLS,
    copy_memory_batch,
    copy_memory_metrics,
    copy_memory_split,
    step_generator,
)
from .corpus import Corpus, Tokenizer, encode_split, load_corpus
from .errors import CorpusDownloadError, CorpusError, CorpusNotFoundError
from .hub import HF_CORPORA, hf_offline
from .lm_batches import OrderedLMBatches, batchify, perplexity
from .local_datasets import read_dataset_folder
from .sentencepiece_tokenizer import SentencePieceTokenizer, train_sentencepiece
from .sources import CorpusSource, HFSource, TextDirSource, corpus_source, load_hf_source
from .vocab import EOS, UNK, WordVocab, build_vocab

__all__ = [
    "COPY_LEN",
    "EOS",
    "HF_CORPORA",
    "MARKER",
    "N_SYMBOLS",
    "UNK",
    "Corpus",
    "CorpusDownloadError",
    "CorpusError",
    "CorpusNotFoundError",
    "CorpusSource",
    "HFSource",
    "OrderedLMBatches",
    "SentencePieceTokenizer",
    "TextDirSource",
    "Tokenizer",
    "WordVocab",
    "batchify",
    "build_vocab",
    "copy_memory_batch",
    "copy_memory_metrics",
    "copy_memory_split",
    "corpus_source",
    "encode_split",
    "hf_offline",
    "load_corpus",
    "load_hf_source",
    "perplexity",
    "read_dataset_folder",
    "step_generator",
    "train_sentencepiece",
]
