"""A trained deq-lm model with its vocabulary, saved, loaded and pushed as Hugging Face users expect
(:class:`deq_core.train.hub.HubModel`, huggingface_hub's ``ModelHubMixin``)::

    from deq_lm.hub import PretrainedLM

    lm = PretrainedLM.from_run("RUN")                  # a run's newest checkpoint (or RUN/checkpoints/step_N)
    lm.save_pretrained("OUT")                          # config.json, model.safetensors, vocabulary, README.md
    lm.push_to_hub("user/deq-transformer-ptb")         # after `hf auth login` (or token=...)
    lm = PretrainedLM.from_pretrained("user/deq-transformer-ptb")   # or the folder "OUT"
    ids = lm.encode("the cat sat on the mat")          # (L,) int64: as the corpus was encoded, <eos> ending the line
    out = lm(ids[None])                                # deq_lm.models.ModelOutput: logits (1, L, vocab), DEQ info
    lm.decode(ids), lm.generate("the cat", max_new_tokens=5)

The folder: ``model.safetensors`` (the :class:`~deq_lm.models.SequenceModel`'s weights, tied weights stored once),
``config.json``::

    {"architecture": "deq_transformer", "vocab_size": 10000, "task": "lm", "model": {the run's model section},
     "deq": {the run's deq section (DEQ models)}, "tokenizer": {"type": "word" | "sentencepiece", "lower": false},
     "training": {preset, step, config, final metrics: deq_core.train.hub.run_record}, "deq_lm_version": "..."}

the vocabulary, ``vocab.txt`` (a word-level vocabulary: one token per line, line i holds id i) or ``tokenizer.model``
(the SentencePiece model), and ``README.md``, the model card. A copy-memory model has no vocabulary (its inputs are
symbol ids). Loading reads JSON, text, a SentencePiece model and safetensors only and imports nothing named in a file:
a ``deq`` section whose solver is an import path is refused (pass ``deq=`` a layer you built).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import deq_core
from deq_core.train.checkpoints import CONFIG_FILE, WEIGHTS_FILE, load_weights, resolve_checkpoint
from deq_core.train.deq_config import DEQConfig
from deq_core.train.hub import (
    CardFields,
    HubModel,
    HubModelError,
    json_writer,
    required_file,
    run_record,
    weights_writer,
)
from deq_core.train.run_config import config_from_dict
from deq_core.train.trust import check_import_paths

from . import __version__
from .configs import Config
from .data import SentencePieceTokenizer, Tokenizer, WordVocab
from .evaluate import load_model
from .models import ModelOutput, SequenceModel, build_model
from .problems import LanguageModelProblem

__all__ = ["SENTENCEPIECE_FILE", "VOCAB_FILE", "PretrainedLM"]

LIBRARY = "deq-lm"
VOCAB_FILE = "vocab.txt"  # a word-level vocabulary, one token per line
SENTENCEPIECE_FILE = (
    "tokenizer.model"  # a SentencePiece model (protobuf), as Hugging Face's SentencePiece models name it
)
PRIVATE_KEYS = ("data.data_dir", "data.cache_dir")  # local folders: left out of a saved config


def _tokenizer_entry(tokenizer: Tokenizer | None) -> dict[str, Any] | None:
    """config.json's ``tokenizer``: its type and lowercasing (the file names are fixed, never read from a file)."""
    if isinstance(tokenizer, WordVocab):
        return {"type": "word", "lower": tokenizer.lower}
    if isinstance(tokenizer, SentencePieceTokenizer):
        return {"type": "sentencepiece", "lower": tokenizer.lower}
    return None


def _tokenizer_writer(tokenizer: Tokenizer | None) -> tuple[str, Callable[[Path], None]] | None:
    """(file name, writer) of the vocabulary file of ``tokenizer``; None for a model without one."""
    if isinstance(tokenizer, WordVocab):
        text = "".join(f"{token}\n" for token in tokenizer.itos)
        return VOCAB_FILE, lambda path: path.write_text(text, encoding="utf-8")
    if isinstance(tokenizer, SentencePieceTokenizer):
        proto = bytes(tokenizer.processor.serialized_model_proto())
        return SENTENCEPIECE_FILE, lambda path: path.write_bytes(proto)
    return None


def _read_tokenizer(folder: Path, config: Mapping[str, Any]) -> Tokenizer | None:
    """The vocabulary of a model folder (None for a copy-memory model).

    Raises:
        HubModelError: a language model without a vocabulary entry or file, an unknown type, or a vocabulary whose
            size is not the model's.
        CorpusError: the file is not a vocabulary / SentencePiece model.
    """
    entry = config.get("tokenizer")
    if entry is None and config.get("task", "copy_memory") == "copy_memory":
        return None
    if not isinstance(entry, dict):
        raise HubModelError(
            f"{folder / CONFIG_FILE} names no vocabulary: it was written by an earlier deq-lm export, without one; "
            "save the model again from its run (python -m deq_lm.export RUN OUT)."
        )
    lower = bool(entry.get("lower", False))
    if entry.get("type") == "word":
        path = required_file(folder, VOCAB_FILE, "its vocabulary", LIBRARY)
        tokenizer: Tokenizer = WordVocab(tuple(path.read_text(encoding="utf-8").split("\n")[:-1]), lower=lower)
    elif entry.get("type") == "sentencepiece":
        path = required_file(folder, SENTENCEPIECE_FILE, "its SentencePiece model", LIBRARY)
        tokenizer = SentencePieceTokenizer(path, lower=lower)
    else:
        raise HubModelError(
            f"{folder / CONFIG_FILE}: tokenizer type {entry.get('type')!r} is not 'word' or 'sentencepiece'."
        )
    if len(tokenizer) != config["vocab_size"]:
        raise HubModelError(
            f"{path} holds {len(tokenizer)} tokens, the model {config['vocab_size']}: the vocabulary is not the "
            "model's; save the model again from its run."
        )
    return tokenizer


def _build(folder: Path, config: Mapping[str, Any], deq: deq_core.DEQ | None) -> SequenceModel:
    """The model that config.json describes, with the folder's weights, in eval mode (``deq``: a layer that replaces
    the one of the ``deq`` section)."""
    if not isinstance(config.get("model"), dict) or not isinstance(config.get("vocab_size"), int):
        raise HubModelError(
            f"{folder / CONFIG_FILE} is not a deq-lm model's (no model section and vocab_size): load it with the "
            "library that wrote it."
        )
    values: dict[str, Any] = {"data": {"task": config.get("task", "copy_memory")}, "model": config["model"]}
    if deq is None and isinstance(config.get("deq"), dict):
        fix = "build that layer and pass from_pretrained(..., deq=layer)"
        check_import_paths(DEQConfig, config["deq"], (), "deq.", fix=fix)
        values["deq"] = config["deq"]
    cfg = config_from_dict(Config, values)
    model = build_model(cfg, config["vocab_size"])
    if deq is not None and cfg.is_deq:
        model.body.deq = deq  # type: ignore[union-attr]
    load_weights(model, required_file(folder, WEIGHTS_FILE, "the weights", LIBRARY))
    return model.eval()


class PretrainedLM(nn.Module, HubModel, library_name=LIBRARY, pipeline_tag="text-generation"):
    """A trained :class:`~deq_lm.models.SequenceModel` with its vocabulary (see the module's docstring).

    Args:
        model: the sequence model (``self.model``); calling this module calls it.
        config: what config.json holds (``architecture``, ``vocab_size``, ``task``, ``model``, ``deq``, and
            ``training``, the run's record for the model card); :meth:`from_run` builds it.
        tokenizer: the vocabulary (a :class:`~deq_lm.data.WordVocab` or
            :class:`~deq_lm.data.SentencePieceTokenizer`), None for a copy-memory model.
    """

    hub_patterns = (*HubModel.hub_patterns, VOCAB_FILE, SENTENCEPIECE_FILE)

    def __init__(self, model: SequenceModel, config: Mapping[str, Any], tokenizer: Tokenizer | None = None) -> None:
        super().__init__()
        self.model = model
        self.config = dict(config)
        self.tokenizer = tokenizer

    @classmethod
    def from_run(
        cls, run: str | Path, data_dir: str | Path | None = None, trusted_modules: Collection[str] = ()
    ) -> PretrainedLM:
        """The model of a training run (its newest complete checkpoint, or ``RUN/checkpoints/step_N``), with the
        vocabulary of its corpus, loaded as ``python -m deq_lm.evaluate`` loads it. ``data_dir``: the corpus folder if
        it moved (language modeling); ``trusted_modules``: the modules whose solvers the run's config may name by
        import path (none else is imported).

        Raises:
            FileNotFoundError: not a run or checkpoint folder, or the corpus is missing.
            ValueError: a config or checkpoint that cannot be used (a CheckpointError, an UntrustedImportError, a
                CorpusError).
        """
        run_dir, checkpoint = resolve_checkpoint(Path(run))
        cfg, problem, model, _ = load_model(
            checkpoint, None if data_dir is None else Path(data_dir), False, trusted_modules
        )
        config: dict[str, Any] = {
            "architecture": cfg.model.name, "vocab_size": problem.vocab_size, "task": cfg.data.task,
            "model": dataclasses.asdict(cfg.model),
        }  # fmt: skip
        if cfg.is_deq:
            config["deq"] = dataclasses.asdict(cfg.deq)
        config["training"] = run_record(run_dir, checkpoint, PRIVATE_KEYS)
        tokenizer = problem.corpus.tokenizer if isinstance(problem, LanguageModelProblem) else None
        return cls(model, config, tokenizer)

    @classmethod
    def _from_folder(cls, folder: Path, config: dict[str, Any], deq: deq_core.DEQ | None = None) -> PretrainedLM:
        """The model of a folder (:meth:`from_pretrained`'s work): ``deq`` replaces the layer config.json describes
        (needed when the run's solver was given by import path, which loading does not import)."""
        model = _build(folder, config, deq)
        return cls(model, config, _read_tokenizer(folder, config)).eval()

    def hub_files(self) -> dict[str, Callable[[Path], None]]:
        """config.json, model.safetensors and the vocabulary file."""
        config = {key: value for key, value in self.config.items() if key not in ("tokenizer", "deq_lm_version")}
        entry = _tokenizer_entry(self.tokenizer)
        if entry is not None:
            config["tokenizer"] = entry
        files = {
            CONFIG_FILE: json_writer({**config, "deq_lm_version": __version__}),
            WEIGHTS_FILE: weights_writer(self.model),
        }
        vocabulary = _tokenizer_writer(self.tokenizer)
        if vocabulary is not None:
            files[vocabulary[0]] = vocabulary[1]
        return files

    def card_fields(self) -> CardFields:
        """The model card: what the model is and was trained on, how to use it, its solver, metrics and config."""
        record = self.config.get("training")
        data = ((record or {}).get("config") or {}).get("data", {})
        if self.config.get("task") == "lm":
            kind = "word-level vocabulary" if isinstance(self.tokenizer, WordVocab) else "SentencePiece vocabulary"
            what = f"a language model on the corpus `{data.get('corpus', '?')}` ({kind} of {self.config['vocab_size']})"
            usage = 'ids = lm.encode("the cat sat on the mat")\nout = lm(ids[None])  # logits (1, L, vocab)\n'
            usage += 'print(lm.generate("the cat", max_new_tokens=5))'
        else:
            what = f"the copy-memory task (T = {data.get('T', '?')}; inputs are symbol ids, no vocabulary)"
            usage = "out = lm(torch.randint(0, 10, (1, 26)))  # logits (1, 26, 10)"
        summary = f"A `{self.config.get('architecture')}` sequence model trained with deq-lm for {what}."
        load = f'from deq_lm.hub import PretrainedLM\n\nlm = PretrainedLM.from_pretrained("REPO_ID")\n{usage}'
        return CardFields(
            title=f"{self.config.get('architecture')} (deq-lm)", summary=summary, usage=load,
            solver=self.config.get("deq"), record=record,
        )  # fmt: skip

    def forward(self, tokens: Tensor, state: Any = None, *, targets: Tensor | None = None) -> ModelOutput:
        """``self.model(tokens, state, targets=targets)``: tokens (B, L) int64 ids (:meth:`encode`)."""
        return self.model(tokens, state, targets=targets)

    def _vocabulary(self) -> Tokenizer:
        if self.tokenizer is None:
            raise HubModelError(
                f"this {self.config.get('task', 'copy_memory')} model has no vocabulary: its inputs are symbol ids "
                "(a LongTensor of shape (B, L)), not text."
            )
        return self.tokenizer

    def encode(self, text: str, end_line: bool = True) -> Tensor:
        """The ids of ``text`` as the corpus was encoded: each line's tokens (unknown words -> ``<unk>``), then the
        end-of-line id; ``end_line=False`` leaves it off the last line (a prompt to continue). Returns (L,) int64.

        Raises:
            HubModelError: the model has no vocabulary (copy memory).
        """
        vocabulary = self._vocabulary()
        ids = [i for line in text.splitlines() for i in vocabulary.encode_line(line)]
        if ids and not end_line:
            ids.pop()
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids: Tensor | Iterable[int]) -> str:
        """The text of ``ids`` ((L,) ids, a tensor or a sequence of ints): each end-of-line id ends a line.

        Raises:
            HubModelError: the model has no vocabulary (copy memory).
        """
        if isinstance(ids, Tensor):
            ids = ids.reshape(-1).tolist()
        return self._vocabulary().decode(int(i) for i in ids)

    @torch.no_grad()
    def generate(self, prompt: str, max_new_tokens: int = 20) -> str:
        """The greedy continuation of ``prompt`` (its ids without the final end of line): ``max_new_tokens`` times,
        the most probable next token given the whole sequence so far, read from the start with no carried state.
        Returns the text of the new tokens. The model is used in its current mode (from_pretrained: eval).

        Raises:
            HubModelError: no vocabulary (copy memory), or a prompt of no token.
        """
        ids = self.encode(prompt, end_line=False).tolist()
        if not ids:
            raise HubModelError("generate needs a prompt of at least one token (an empty prompt has none).")
        device = next(self.model.parameters()).device
        new: list[int] = []
        for _ in range(max_new_tokens):
            tokens = torch.tensor([ids + new], device=device)
            log_probs = self.model.head.log_probs(self.model(tokens).hidden[:, -1:])
            new.append(int(log_probs[0, -1].argmax()))
        return self.decode(new)
