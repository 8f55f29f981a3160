"""A stand-in for the Hugging Face Hub, for tests of ``push_to_hub`` / ``from_pretrained``
(:mod:`deq_core.train.hub`) that must not reach the network.

:class:`StandInHub` replaces huggingface_hub's ``HfApi.create_repo`` and ``HfApi.upload_folder`` (through pytest's
``monkeypatch``, so the production code is unchanged and calls huggingface_hub as it would for the Hub) and points
huggingface_hub's endpoint at a closed local port, so that any other call fails at once on this machine. An upload's
files land in a Hugging Face cache folder laid out as a download leaves it (``models--USER--NAME/snapshots/COMMIT``,
``refs/main``); after :meth:`StandInHub.offline`, ``from_pretrained("USER/NAME", cache_dir=hub.cache)`` reads them
back as from the Hub. What the stand-in cannot show: that the real Hub accepts the upload (a token, the network).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

import huggingface_hub
import huggingface_hub.constants

__all__ = ["COMMIT", "StandInHub"]

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the revision every upload to the stand-in becomes
CLOSED_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing listens there


class MonkeyPatch(Protocol):
    """What the stand-in needs of pytest's ``monkeypatch`` fixture."""

    def setattr(self, target: Any, name: str, value: Any) -> None: ...


class StandInHub:
    """The Hub, as far as a push and a download by repo id go, in the folder ``cache``.

    Attributes:
        cache: a Hugging Face cache folder (pass it as ``cache_dir=``).
        calls: every replaced call, in order: (``"create_repo"`` or ``"upload_folder"``, its keyword arguments).
        uploads: per repo id, the files of its last upload (name -> bytes).
    """

    def __init__(self, monkeypatch: MonkeyPatch, cache: str | Path) -> None:
        self.monkeypatch = monkeypatch
        self.cache = Path(cache)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.uploads: dict[str, dict[str, bytes]] = {}
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", CLOSED_ENDPOINT)
        monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", self._create_repo())
        monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", self._upload_folder())

    def _create_repo(self) -> Any:
        def create_repo(api: Any, repo_id: str, **kwargs: Any) -> SimpleNamespace:
            self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
            return SimpleNamespace(repo_id=repo_id)

        return create_repo

    def _upload_folder(self) -> Any:
        def upload_folder(api: Any, *, repo_id: str, folder_path: str | Path, **kwargs: Any) -> str:
            self.calls.append(("upload_folder", {"repo_id": repo_id, "folder_path": folder_path, **kwargs}))
            self.uploads[repo_id] = {p.name: p.read_bytes() for p in Path(folder_path).iterdir() if p.is_file()}
            self.put(repo_id, Path(folder_path))
            return f"https://hub.invalid/{repo_id}/commit/{COMMIT}"

        return upload_folder

    def put(self, repo_id: str, folder: Path) -> Path:
        """Make ``folder``'s files the main revision of the model repo ``repo_id`` in the cache; returns the
        snapshot folder."""
        entry = self.cache / f"models--{repo_id.replace('/', '--')}"
        snapshot = entry / "snapshots" / COMMIT
        if snapshot.exists():
            shutil.rmtree(snapshot)
        shutil.copytree(folder, snapshot)
        (entry / "refs").mkdir(exist_ok=True)
        (entry / "refs" / "main").write_text(COMMIT)
        return snapshot

    def offline(self) -> None:
        """Put huggingface_hub offline (``HF_HUB_OFFLINE``): a download by repo id reads the cache only."""
        self.monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
