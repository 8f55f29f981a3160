"""Trained models on the Hugging Face Hub: ``save_pretrained(DIR)``, ``from_pretrained(DIR or "user/name")`` and
``push_to_hub("user/name")``, shared by the task packages. Installed with the extra ``pip install 'deq-core[hub]'``
(huggingface_hub); neither ``import deq_core`` nor the rest of :mod:`deq_core.train` imports it.

:class:`HubModel` is huggingface_hub's :class:`~huggingface_hub.ModelHubMixin` with this project's rules:

- A saved folder holds ``config.json`` (what rebuilds the model, as plain JSON), ``model.safetensors`` (the weights:
  never a pickle), the task's own files (a vocabulary) and ``README.md``, the model card: the run's preset, final
  metrics and configuration (:func:`run_record`). Each file is written aside and renamed; an existing README.md is
  kept, as huggingface_hub does (a card edited by hand survives a new save).
- ``from_pretrained`` takes a folder or a Hub repo id (``snapshot_download`` fetches only the files a model folder
  holds, :attr:`HubModel.hub_patterns`, into the Hugging Face cache), reads config.json as data (nothing named in it is
  imported) and fails with one line (:class:`HubModelError`, or a
  :class:`~deq_core.train.checkpoints.CheckpointError` for weights that do not fit or cannot be read) for a folder that
  is not such a model.
- ``save_pretrained`` and ``push_to_hub`` are the mixin's own: ``push_to_hub`` creates the repo if needed and uploads
  a folder written by ``save_pretrained`` in one commit (``HfApi.create_repo``, ``HfApi.upload_folder``).

A task package subclasses it together with ``torch.nn.Module`` and implements three methods::

    class PretrainedX(nn.Module, HubModel, library_name="deq-x", pipeline_tag="..."):
        def hub_files(self) -> dict[str, Callable[[Path], None]]: ...  # file name -> writer (config.json, weights, ...)
        @classmethod
        def _from_folder(cls, folder: Path, config: dict, **options): ...  # the model of a folder
        def card_fields(self) -> CardFields: ...  # what its model card says
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

try:
    from huggingface_hub import ModelCard, ModelCardData, ModelHubMixin, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
except ModuleNotFoundError as err:
    if (err.name or "").partition(".")[0] != "huggingface_hub":
        raise
    raise ImportError(
        "deq_core.train.hub needs huggingface_hub, which `pip install deq-core` does not install: "
        "pip install 'deq-core[hub]'"
    ) from None

from .checkpoints import CONFIG_FILE, WEIGHTS_FILE, read_json
from .cli import usage_error
from .errors import UsageError
from .files import check_new_folder, write_file, write_folder
from .metrics import read_metrics
from .reports import markdown_table
from .run_config import saved_run_config

__all__ = [
    "CARD_FILE",
    "add_push_option",
    "save_new",
    "CardFields",
    "HubModel",
    "HubModelError",
    "json_writer",
    "model_folder",
    "push_if_asked",
    "read_model_config",
    "required_file",
    "run_record",
    "SAVE_OPTION",
    "weights_writer",
]

CARD_FILE = "README.md"  # the model card, as the Hub shows it
METRICS_FILE = "metrics.jsonl"  # a run's metrics (deq_core.train.metrics)
SAVE_OPTION = "save_directory"  # what an OutputError of save_pretrained names

H = TypeVar("H", bound="HubModel")

CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ title }}

{{ summary }}

## Use

```python
{{ usage }}
```
{{ details }}
## Final metrics

{{ metrics }}
## Training configuration

{{ configuration }}
"""


class HubModelError(UsageError, ValueError):
    """A folder or Hub repo that is not a saved model of this project (no config.json, a config.json of another
    library, a missing weights or vocabulary file), or a repo the Hub does not give: one line saying what is wrong and
    how to fix it."""


@dataclass(frozen=True)
class CardFields:
    """What a model card says besides the mixin's metadata (library, tags, license).

    Attributes:
        title: the card's heading.
        summary: a paragraph: what the model is and what it was trained on (Markdown).
        usage: Python lines that load and run the model.
        solver: the DEQ layer's settings (solvers, limits, tolerances: a config's ``deq`` section as JSON data),
            shown in a table; None for an explicit network.
        details: further Markdown sections, each starting with ``## ``.
        record: :func:`run_record` of the run the model comes from, or None (then the card says it was not
            recorded).
    """

    title: str
    summary: str
    usage: str
    solver: Mapping[str, Any] | None = None
    details: str = ""
    record: Mapping[str, Any] | None = field(default=None)


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _metrics_markdown(record: Mapping[str, Any] | None) -> str:
    """The final metrics of ``record`` (:func:`run_record`) as a Markdown table, one row per split."""
    metrics = (record or {}).get("metrics") or {}
    if not metrics:
        return "Not recorded (the model was not saved from a training run with a metrics file).\n"
    keys = list(dict.fromkeys(key for values in metrics.values() for key in values if key != "step"))
    rows = [[split, values.get("step", ""), *(_number(values.get(key, "")) for key in keys)] for split, values in
            metrics.items()]  # fmt: skip
    return markdown_table(["split", "step", *keys], rows)


def _solver_markdown(settings: Mapping[str, Any] | None) -> str:
    """The DEQ layer's ``settings`` as a Markdown section ("" for an explicit network)."""
    if not settings:
        return ""
    rows = [[f"`{key}`", f"`{json.dumps(value)}`"] for key, value in settings.items()]
    intro = "The equilibrium layer's settings, rebuilt by from_pretrained (limits count calls of f):"
    return f"## Equilibrium solver\n\n{intro}\n\n{markdown_table(['setting', 'value'], rows)}"


def _configuration_markdown(record: Mapping[str, Any] | None) -> str:
    """The preset, step and full configuration of ``record`` (:func:`run_record`) as Markdown."""
    if not record:
        return "Not recorded (the model was not saved from a training run).\n"
    config = json.dumps(record.get("config", {}), indent=2)
    return (
        f"Preset `{record.get('preset', '?')}`, weights of step {record.get('step', '?')}.\n\n```json\n{config}\n```\n"
    )


def _blank(config: dict[str, Any], dotted: str) -> None:
    section, _, key = dotted.rpartition(".")
    node: Any = config
    for part in filter(None, section.split(".")):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and key in node:
        node[key] = ""


def run_record(run_dir: str | Path, checkpoint: str | Path, private_keys: Collection[str] = ()) -> dict[str, Any]:
    """What a model card tells of the run a model comes from: ``{"preset", "step", "config", "metrics"}``.

    Args:
        run_dir: the run's output folder (its config.json and metrics.jsonl).
        checkpoint: the checkpoint folder the weights come from (``RUN/checkpoints/step_N``): its step chooses the
            metrics, the last evaluation of each split (valid, test) at or before it.
        private_keys: dotted config keys blanked in the record (``"data.data_dir"``): local folders that mean nothing
            to a reader of the card, and may name the user's machine.

    Returns:
        ``config``: the run's configuration (JSON data); ``metrics``: {split: {"step", metric: value, ...}}, empty
        when the run logged no evaluation.

    Raises:
        CheckpointError: the run's config.json is not JSON; MetricsError: its metrics.jsonl is not a metrics file.
    """
    saved = saved_run_config(run_dir)
    step = int(Path(checkpoint).name.removeprefix("step_"))
    config = json.loads(json.dumps(saved.get("config", {})))  # a copy
    for key in private_keys:
        _blank(config, key)
    metrics: dict[str, dict[str, Any]] = {}
    for row in read_metrics(Path(run_dir) / METRICS_FILE):
        split, at = row.get("split"), row.get("step")
        if split != "train" and isinstance(split, str) and isinstance(at, int) and at <= step:
            metrics[split] = {"step": at, **{k: v for k, v in row.items() if k not in ("split", "step")}}
    return {"preset": saved.get("name", "?"), "step": step, "config": config, "metrics": metrics}


def weights_writer(module: Any, metadata: Mapping[str, str] | None = None) -> Callable[[Path], None]:
    """A writer of ``module``'s weights as a safetensors file (safetensors' ``save_model``: tied weights stored once;
    ``metadata`` in its header)."""
    from safetensors.torch import save_model

    return lambda path: save_model(module, str(path), metadata=dict(metadata) if metadata else None)


def json_writer(data: Any) -> Callable[[Path], None]:
    """A writer of ``data`` as indented JSON text with a final newline."""
    text = json.dumps(data, indent=2) + "\n"
    return lambda path: path.write_text(text, encoding="utf-8")


def required_file(folder: Path, name: str, what: str, library: str) -> Path:
    """``folder / name``, which a model folder of ``library`` holds.

    Raises:
        HubModelError: it is missing (``what`` says what the file is, e.g. "its vocabulary").
    """
    path = folder / name
    if not path.is_file():
        raise HubModelError(
            f"{folder} has no {name} ({what}): it is not a complete model folder of {library}; save the model again "
            "with save_pretrained (or python -m deq_*.export RUN OUT), and push the whole folder."
        )
    return path


def model_folder(
    name_or_path: str | Path,
    patterns: Sequence[str],
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
    force_download: bool = False,
) -> Path:
    """The local folder of ``name_or_path``: itself when it is a folder, else the snapshot of the Hub repo of that id
    in the Hugging Face cache (downloaded unless ``local_files_only`` or ``HF_HUB_OFFLINE`` is set), with only the
    files matching ``patterns``.

    Raises:
        HubModelError: a file, a path that does not exist and is no repo id, a repo or revision the Hub does not
            have (or does not show without a token), or, offline, a repo that is not in the cache.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise HubModelError(f"{path} is a file: from_pretrained takes the folder save_pretrained wrote, or a repo id.")
    name = str(name_or_path)
    try:
        return Path(
            snapshot_download(
                name,
                revision=revision,
                cache_dir=cache_dir,
                token=token,
                local_files_only=local_files_only,
                force_download=force_download,
                allow_patterns=list(patterns),
            )  # fmt: skip
        )
    except HFValidationError:
        raise HubModelError(
            f"{name} is neither a folder nor a Hugging Face repo id (user/name): check the path, or give the repo id."
        ) from None
    except RevisionNotFoundError:
        raise HubModelError(
            f"the Hub repo {name} has no revision {revision!r}: check the branch, tag or commit."
        ) from None
    except RepositoryNotFoundError:
        raise HubModelError(
            f"{name} is not a folder, and the Hub has no model repo {name} (or it is private: log in with `hf auth "
            "login`, or pass token=)."
        ) from None
    except LocalEntryNotFoundError:
        raise HubModelError(
            f"{name} is not a folder, and the Hub repo {name} is not in the local Hugging Face cache while the Hub "
            "cannot be reached (offline, or HF_HUB_OFFLINE=1): connect once to download it, or give its folder."
        ) from None
    except HfHubHTTPError as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise HubModelError(f"the Hub did not give the repo {name}: {reason}") from None


def read_model_config(folder: Path, library: str) -> dict[str, Any]:
    """The config.json of the model folder ``folder``, read as JSON data (a dict).

    Raises:
        HubModelError: no config.json (not a model folder of ``library``), or one that is not a JSON object.
        CheckpointError: config.json is not JSON.
    """
    path = required_file(folder, CONFIG_FILE, "what rebuilds the model", library)
    config = read_json(path)
    if not isinstance(config, dict):
        raise HubModelError(f"{path} is not a JSON object: it is not a model folder of {library}.")
    return config


def add_push_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--push-to-hub REPO_ID`` (``args.push_to_hub``, None when not given) to an export command line."""
    parser.add_argument(
        "--push-to-hub", metavar="REPO_ID", default=None,
        help="then upload OUT to this Hugging Face Hub model repo (user/name; log in first with hf auth login)",
    )  # fmt: skip


def save_new(out: str | Path, load: Callable[[], H]) -> H:
    """``load()`` a model and ``save_pretrained`` it as the new folder ``out`` (written into ``OUT.partial`` and
    renamed when complete: :func:`~deq_core.train.files.write_folder`); returns the model. ``out`` is checked before
    ``load`` runs, so that a folder in use fails before a long load.

    Raises:
        FileExistsError: ``out`` exists and is not an empty folder (nothing is loaded or written).
        OutputError: ``out`` cannot be written (a link there or at ``OUT.partial``, a name the system cannot take, a
            read-only folder, a full device): :func:`~deq_core.train.files.check_new_folder`.
    """
    out = Path(out)
    check_new_folder(out)
    model = load()
    write_folder(out, model.save_pretrained)
    return model


def push_if_asked(prog: str, model: HubModel, repo_id: str | None, folder: Path) -> int:
    """An export command line's ``--push-to-hub``, after it saved ``model`` to ``folder``: nothing when ``repo_id`` is
    None; else ``model.push_to_hub(repo_id)``, printing the commit's url. Returns the exit status: 0, or 2 when the
    push failed (no token, no network, a repo id the Hub refuses), with one line ``PROG: error: ...`` on stderr that
    says ``folder`` is written and how to push it by hand."""
    if repo_id is None:
        return 0
    try:
        url = model.push_to_hub(repo_id)
    except Exception as err:  # huggingface_hub and its HTTP client raise many types (no token, no network, 4xx)
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        return usage_error(
            prog,
            f"pushing to the Hub repo {repo_id} failed ({type(err).__name__}: {reason}); {folder} is written: log in "
            f"with `hf auth login`, then push it with `hf upload {repo_id} {folder} .`.",
        )
    print(f"pushed to {url}")
    return 0


class HubModel(ModelHubMixin, license="mit", tags=["deep-equilibrium-model"]):
    """huggingface_hub's ``ModelHubMixin`` for this project's models (see the module's docstring): a subclass
    implements :meth:`hub_files`, :meth:`_from_folder` and :meth:`card_fields`; ``save_pretrained`` and
    ``push_to_hub`` are the mixin's, ``from_pretrained`` is :meth:`from_pretrained` below."""

    hub_patterns: ClassVar[tuple[str, ...]] = (CONFIG_FILE, WEIGHTS_FILE, CARD_FILE)  # what from_pretrained fetches

    def hub_files(self) -> dict[str, Callable[[Path], None]]:
        """The files of the saved folder (README.md aside), by name: each a writer that writes the whole file to the
        path it is given."""
        raise NotImplementedError

    @classmethod
    def _from_folder(cls: type[H], folder: Path, config: dict[str, Any], **options: Any) -> H:
        """The model saved in ``folder``, whose config.json is ``config`` (a dict, read as data); ``options``: the
        keyword arguments of :meth:`from_pretrained` that are the subclass's own."""
        raise NotImplementedError

    def card_fields(self) -> CardFields:
        """What the model card (README.md) says."""
        raise NotImplementedError

    def _save_pretrained(self, save_directory: Path) -> None:
        """Write :meth:`hub_files` into ``save_directory``, each aside and renamed. (A subclass whose own library
        writes the folder, as timm's ``save_for_hf`` does, overrides this method instead of :meth:`hub_files`.)

        Raises:
            OutputError: a folder that cannot be written, a full device (one line naming the file).
        """
        for name, write in self.hub_files().items():
            write_file(Path(save_directory) / name, write, option=SAVE_OPTION)

    def generate_model_card(self, *args: Any, **kwargs: Any) -> ModelCard:
        """The model card: the mixin's metadata (library, tags, license, pipeline) and :meth:`card_fields`."""
        fields = self.card_fields()
        sections = [part.strip() for part in (_solver_markdown(fields.solver), fields.details) if part.strip()]
        return ModelCard.from_template(
            card_data=ModelCardData(**self._hub_mixin_info.model_card_data.to_dict()), template_str=CARD_TEMPLATE,
            title=fields.title, summary=fields.summary, usage=fields.usage.strip(),
            details="".join(f"\n{part}\n" for part in sections),
            metrics=_metrics_markdown(fields.record), configuration=_configuration_markdown(fields.record), **kwargs,
        )  # fmt: skip

    @classmethod
    def from_pretrained(  # type: ignore[override]
        cls: type[H],
        pretrained_model_name_or_path: str | Path,
        *,
        force_download: bool = False,
        token: str | bool | None = None,
        cache_dir: str | Path | None = None,
        local_files_only: bool = False,
        revision: str | None = None,
        **options: Any,
    ) -> H:
        """The model saved by ``save_pretrained`` in a folder, or pushed to a Hub repo (``"user/name"``; the
        keywords are huggingface_hub's: ``revision``, ``cache_dir``, ``token``, ``local_files_only``,
        ``force_download``). ``options`` go to the subclass (e.g. ``deq=`` a DEQ layer of the user's own).

        The mixin's own from_pretrained passes config.json to the model's ``__init__``; here it is checked first.

        Raises:
            HubModelError: the folder or repo is not such a model (see :func:`model_folder`,
                :func:`read_model_config`, :func:`required_file`).
            CheckpointError: config.json or the weights cannot be read, or the weights do not fit the model.
        """
        folder = model_folder(
            pretrained_model_name_or_path, cls.hub_patterns, revision=revision, cache_dir=cache_dir, token=token,
            local_files_only=local_files_only, force_download=force_download,
        )  # fmt: skip
        library = cls._hub_mixin_info.model_card_data.library_name or cls.__name__
        return cls._from_folder(folder, read_model_config(folder, library), **options)
