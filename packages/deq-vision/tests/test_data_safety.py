"""Data files are data, never code, and an image folder never leaves its class folders: a CIFAR-10 batch
that holds anything but the official format's numpy arrays is refused in one line before any of it runs, on train
and on evaluate; a directory symlink inside a class folder (a loop, or a way into another class) is refused in one
line; symlinked image files are kept; a FIFO named like an image or like a CIFAR-10 batch is refused in one line
instead of blocking training."""

from __future__ import annotations

import os
import pickle
import shlex
import shutil
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import learnable_images
from deq_core.train.testing.faults import python_module
from deq_vision import evaluate, train
from deq_vision.data import DatasetError, image_folder, read_batch, write_cifar_folder

CIFAR_RUN = ["--config", "tiny-mdeq", "steps=2"]
FOLDER_RUN = ["--config", "tiny-mdeq", "dataset=folder", "steps=2", "eval_every=2", "save_every=2"]


class _OpensOnLoad:
    """Unpickling it creates ``marker`` (``open(marker, "w")``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return open, (self.marker, "w")


class _ShellOnLoad(_OpensOnLoad):
    """Unpickling it runs ``touch marker`` in a shell (``os.system``)."""

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return os.system, (f"touch {shlex.quote(self.marker)}",)


def _plant(path: Path, payload: object) -> None:
    """Replace the batch ``path`` with a CIFAR-shaped dict whose b"data" is ``payload``."""
    with path.open("wb") as fh:
        pickle.dump({b"data": payload, b"labels": [0]}, fh)


def _one_line(capsys: pytest.CaptureFixture[str], prog: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m deq_vision.{prog}: error: "), err
    return err


def _python2_batch(data: np.ndarray, labels: list[int]) -> bytes:
    """A batch as the official files are written (Python 2 cPickle, protocol 2, numpy 1.x): bytes as
    SHORT_BINSTRING / BINSTRING, the array through numpy.core.multiarray._reconstruct, numpy.ndarray, numpy.dtype."""
    rows, width = data.shape
    raw = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
    label_ops = b"".join(b"K" + bytes([v]) for v in labels)
    return b"".join([
        b"\x80\x02}(",  # PROTO 2, EMPTY_DICT, MARK
        b"U\x04data",  # key b"data"
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n",  # GLOBAL x2
        b"K\x00\x85U\x01b\x87R",  # _reconstruct(ndarray, (0,), b"b")
        b"(K\x01M" + struct.pack("<H", rows) + b"M" + struct.pack("<H", width) + b"\x86",  # state: 1, (rows, width)
        b"cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R",  # dtype(b"u1", 0, 1)
        b"(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb",  # its state, BUILD
        b"\x89T" + struct.pack("<I", len(raw)) + raw + b"tb",  # not Fortran, the raw bytes; BUILD the array
        b"U\x06labels](" + label_ops + b"e",  # key b"labels": a list of ints
        b"U\x0bbatch_labelU\x15training batch 1 of 5",
        b"U\tfilenames]U\x05a.pnga",
        b"u.",  # SETITEMS, STOP
    ])  # fmt: skip


def test_genuine_batches_are_read_from_every_numpy_pickling(tmp_path: Path) -> None:
    """The official files' pickling (Python 2, numpy 1.x) and Python 3's protocols 3 to 5 under today's numpy."""
    images, labels = learnable_images(3)
    flat = images.transpose(0, 3, 1, 2).reshape(3, -1)
    entry = {b"batch_label": b"training batch 1 of 5", b"labels": [int(v) for v in labels], b"data": flat,
             b"filenames": [b"a.png", b"b.png", b"c.png"]}  # fmt: skip
    files = {"python2": _python2_batch(flat, [int(v) for v in labels])}
    files.update({f"protocol{p}": pickle.dumps(entry, protocol=p) for p in (3, 4, 5)})
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        read_images, read_labels = read_batch(tmp_path / name)
        assert np.array_equal(read_images, images) and np.array_equal(read_labels, labels), name


@pytest.mark.parametrize("payload", [_OpensOnLoad, _ShellOnLoad])
def test_a_planted_batch_is_refused_before_it_runs(tmp_path: Path, payload: type[_OpensOnLoad]) -> None:
    planted, marker = tmp_path / "data_batch_1", tmp_path / "ran"
    _plant(planted, payload(marker))
    with pytest.raises(DatasetError) as info:
        read_batch(planted)
    message = str(info.value)
    forbidden = f"'{open.__module__}.open'" if payload is _OpensOnLoad else f"'{os.system.__module__}.system'"
    assert "\n" not in message and message.startswith(f"{planted} is not an official CIFAR-10 python batch"), message
    assert forbidden in message, message
    assert not marker.exists()


def test_other_globals_are_named_on_one_line(tmp_path: Path) -> None:
    """Python 3's protocols 0-2 pickle bytes through _codecs.encode (the message says to use protocol 3 or higher); a
    name with a newline (possible with protocol 4's STACK_GLOBAL) stays on one line."""
    old_protocol = tmp_path / "protocol2"
    old_protocol.write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}, protocol=2))
    stack_global = tmp_path / "newline"
    stack_global.write_bytes(b"\x80\x04\x8c\x07os\nhere\x8c\x06system\x93.")  # PROTO 4, two names, STACK_GLOBAL, STOP
    for path, shown in ((old_protocol, "'_codecs.encode'"), (stack_global, "'os\\nhere.system'")):
        with pytest.raises(DatasetError) as info:
            read_batch(path)
        message = str(info.value)
        assert "\n" not in message and shown in message and "protocol 3 or higher" in message, message


@pytest.fixture(scope="module")
def cifar_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a finished tiny run, the clean CIFAR-format folder it was trained on)."""
    root = tmp_path_factory.mktemp("cifar_run")
    images, labels = learnable_images(96)
    write_cifar_folder(root / "cifar", images, labels)
    assert train.main([*CIFAR_RUN, "--data-dir", str(root / "cifar"), "--output-dir", str(root / "run")]) == 0
    return root / "run", root / "cifar"


@pytest.mark.parametrize("name", ["data_batch_3", "test_batch"])
def test_a_planted_batch_stops_train_and_evaluate_in_one_line(
    cifar_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    run, clean = cifar_run
    data = tmp_path / "cifar"
    shutil.copytree(clean, data)
    planted, marker = data / "cifar-10-batches-py" / name, tmp_path / "ran"
    _plant(planted, _OpensOnLoad(marker))
    capsys.readouterr()
    assert train.main([*CIFAR_RUN, "--data-dir", str(data), "--output-dir", str(tmp_path / "run")]) == 2
    err = _one_line(capsys, "train")
    assert f"{planted} is not an official CIFAR-10 python batch" in err and f"'{open.__module__}.open'" in err, err
    assert evaluate.main(["--checkpoint", str(run), "--data-dir", str(data), "--no-sweep"]) == 2
    assert f"{planted} is not an official CIFAR-10 python batch" in _one_line(capsys, "evaluate")
    assert not marker.exists()


_reconstruct = np.zeros(0).__reduce__()[0]  # numpy's own array reconstruction, as its pickles name it


class _Allocates:
    """Unpickling it asks numpy for an array of 2**40 bytes before reading any data: by ``_reconstruct``'s shape, by
    calling ``ndarray``, or by the state of an array of Python objects (``how``)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __reduce__(self) -> tuple[object, ...]:
        if self.how == "reconstruct":
            return _reconstruct, (np.ndarray, (2**40,), b"B")
        if self.how == "ndarray":
            return np.ndarray, ((2**40,), "B")
        return _reconstruct, (np.ndarray, (0,), b"B"), (1, (2**40,), np.dtype(object), False, [0])


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("reconstruct", "it asks numpy for an array of shape (1099511627776,) before reading its data"),
        ("ndarray", "it calls numpy.ndarray, which would allocate an array of the size the file names"),
        ("object state", "it holds an array of Python objects (dtype object)"),
    ],
)
def test_a_batch_asking_for_a_huge_array_is_refused_before_allocating(
    cifar_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, reason: str
) -> None:
    run, clean = cifar_run
    data = tmp_path / "cifar"
    shutil.copytree(clean, data)
    planted = data / "cifar-10-batches-py" / "test_batch"
    _plant(planted, _Allocates(how))
    capsys.readouterr()
    assert train.main([*CIFAR_RUN, "--data-dir", str(data), "--output-dir", str(tmp_path / "run")]) == 2
    assert f"{planted} is not a CIFAR-10 python batch ({reason})." in _one_line(capsys, "train")
    assert evaluate.main(["--checkpoint", str(run), "--data-dir", str(data), "--no-sweep"]) == 2
    assert f"{planted} is not a CIFAR-10 python batch ({reason})." in _one_line(capsys, "evaluate")


def _val_classes(root: Path) -> dict[str, int]:
    return {name: i for i, name in enumerate(sorted(p.name for p in (root / "train").iterdir()))}


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.parametrize("target", ["..", "../bee", "."])
def test_a_directory_symlink_in_a_class_folder_is_refused(image_folder_dir: Path, split: str, target: str) -> None:
    """A loop (``..``: 492 "ant" images instead of 12 before), another class's folder, the class folder itself."""
    link = image_folder_dir / split / "ant" / "more"
    link.symlink_to(target, target_is_directory=True)
    classes = _val_classes(image_folder_dir) if split == "val" else None
    with pytest.raises(DatasetError) as info:
        image_folder(image_folder_dir, split, class_to_idx=classes)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{link} is a symlink to a directory ({target})"), message


def test_a_symlink_loop_in_a_class_folder_stops_training_in_one_line(
    image_folder_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = image_folder_dir / "train" / "bee" / "deeper" / "loop"
    link.parent.mkdir()
    link.symlink_to("../..", target_is_directory=True)
    out = tmp_path / "run"
    assert train.main([*FOLDER_RUN, "--data-dir", str(image_folder_dir), "--output-dir", str(out)]) == 2
    assert f"{link} is a symlink to a directory" in _one_line(capsys, "train")
    assert not (out / "checkpoints").exists()


def test_symlinked_image_files_and_class_folders_are_kept(image_folder_dir: Path, tmp_path: Path) -> None:
    """A link to an image file (e.g. of a dataset shared between users) is one image of the class it is linked into;
    a class folder may be a link to a folder elsewhere."""
    shared = tmp_path / "shared" / "cat"
    shutil.move(image_folder_dir / "train" / "cat", shared)
    (image_folder_dir / "train" / "cat").symlink_to(shared, target_is_directory=True)
    (image_folder_dir / "train" / "ant" / "shared.png").symlink_to(shared / "0.png")
    train_set = image_folder(image_folder_dir, "train")
    assert len(train_set) == 13 and train_set.classes == ["ant", "bee", "cat"]
    assert [train_set.targets.count(k) for k in range(3)] == [5, 4, 4]
    assert (str(image_folder_dir / "train" / "ant" / "shared.png"), 0) in train_set.samples


def test_a_fifo_named_like_an_image_is_refused_in_one_line_instead_of_blocking(image_folder_dir: Path) -> None:
    fifo = image_folder_dir / "train" / "bee" / "waiting.png"
    os.mkfifo(fifo)
    done = python_module("deq_vision.train", *FOLDER_RUN, "--data-dir", str(image_folder_dir), "--output-dir", "run",
                         cwd=image_folder_dir.parent, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"python -m deq_vision.train: error: {fifo} is not a regular file"), line
    train_set = image_folder(image_folder_dir, "train")
    with pytest.raises(DatasetError, match=f"{fifo} is not a regular file"):  # loading it (above the check's limits)
        train_set[[path for path, _ in train_set.samples].index(str(fifo))]


@pytest.mark.parametrize("how", ["fifo", "link to a fifo"])
def test_a_fifo_named_like_a_cifar_batch_is_refused_instead_of_blocking(tmp_path: Path, how: str) -> None:
    """A reader that opened the FIFO would wait for a writer: after 10 s one comes and closes it at once, so that a
    reader that waited ends (with another message) instead of hanging the test."""
    folder = write_cifar_folder(tmp_path / "data", *learnable_images(12))
    batch = folder / "data_batch_1"
    batch.unlink()
    fifo = tmp_path / "fifo" if how == "link to a fifo" else batch
    os.mkfifo(fifo)
    if fifo != batch:
        batch.symlink_to(fifo)

    def release() -> None:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # fails (ENXIO) when no reader waits
        except OSError:
            pass

    writer = threading.Timer(10, release)
    writer.start()
    try:
        with pytest.raises(DatasetError, match=f"{batch} is not a regular file but is named like a CIFAR-10 batch"):
            read_batch(batch)
    finally:
        writer.cancel()
        writer.join()
