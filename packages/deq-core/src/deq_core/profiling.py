"""Memory of a forward pass or a training step, in bytes, measured the same way on any device.

- :func:`saved_tensor_bytes`: the bytes of the storages autograd saves for the backward pass while a function runs
  (the activation memory that an implicit backward makes independent of the solver's iterations).
- :func:`peak_live_bytes`: the largest total size of tensor storages created by a function and alive at the same
  time (forward, backward, solver buffers, temporaries).

Both take a function without arguments and return ``(its result, bytes)``::

    out, saved = deq_core.saved_tensor_bytes(lambda: model(x), exclude=[*model.parameters(), x])
    _, peak = deq_core.peak_live_bytes(lambda: model(x).square().mean().backward())

Both count storages, not tensor views: a tensor that is a view of a larger buffer counts the whole buffer (that is
what stays in memory), and several views of one buffer count it once. They count the logical sizes of storages, not
what an allocator hands out or reserves: ``torch.cuda.max_memory_allocated`` also rounds every block up and counts
the tensors that existed before, and the caching allocator keeps freed blocks reserved.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["peak_live_bytes", "saved_tensor_bytes"]

T = TypeVar("T")


def _storage(x: object) -> torch.UntypedStorage | None:
    """The storage behind the tensor ``x``; None if ``x`` is not a tensor or has no storage (e.g. a sparse tensor)."""
    if not isinstance(x, Tensor):
        return None
    try:
        return x.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return None


def _key(storage: torch.UntypedStorage) -> int:
    """Identity of a live storage (its StorageImpl), on every device: data pointers are all 0 on the meta device."""
    return storage._cdata


def saved_tensor_bytes(
    fn: Callable[[], T], exclude: Iterable[Tensor] = (), batch_size: int | None = None
) -> tuple[T, int]:
    """Run ``fn`` (e.g. a forward pass) and return ``(fn(), bytes)``: the total size of the distinct storages behind
    the tensors that autograd saves for the backward pass while ``fn`` runs.

    Args:
        fn: called once, without arguments, with autograd as the caller left it (nothing is saved under no_grad).
        exclude: tensors whose storages are not counted even when saved, typically the parameters and the inputs,
            which exist whether or not a backward pass follows.
        batch_size: if given, only saved tensors whose first dim equals it are counted (activations; this also
            leaves out parameters and tensors computed from them only, e.g. weight-normalized weights).

    Seen through :func:`torch.autograd.graph.saved_tensors_hooks`: every tensor saved by a built-in op or by a custom
    :class:`torch.autograd.Function`'s ``ctx.save_for_backward``. Not seen: tensors a custom Function keeps as plain
    attributes of ``ctx``, tensors saved under saved-tensor hooks that ``fn`` installs itself (e.g. activation
    checkpointing, which then saves less), and buffers that only exist during the backward pass (e.g. an implicit
    backward's adjoint solver; :func:`peak_live_bytes` sees those). A storage counts once however many of its views
    are saved; one that is saved, freed during ``fn`` (its graph dropped) and replaced by another counts both.
    """
    # Held until the end, so that an excluded storage cannot be freed and its identity reused by a saved one.
    excluded = {_key(s): s for s in map(_storage, exclude) if s is not None}
    counted: dict[int, weakref.ref[torch.UntypedStorage]] = {}
    total = 0

    def pack(t: Tensor) -> tuple[Tensor, int]:
        nonlocal total
        # Kept: a detached alias (the same storage) and its version. Keeping ``t`` itself would, for a saved output,
        # make a reference cycle through its grad_fn that keeps the graph alive after it is dropped.
        packed = t.detach(), t._version
        if batch_size is not None and (t.dim() == 0 or t.shape[0] != batch_size):
            return packed
        storage = _storage(t)
        if storage is None or _key(storage) in excluded:
            return packed
        seen = counted.get(_key(storage))
        if seen is None or seen() is not storage:  # new, or a freed storage's identity reused
            counted[_key(storage)] = weakref.ref(storage)
            total += storage.nbytes()
        return packed

    def unpack(packed: tuple[Tensor, int]) -> Tensor:
        t, version = packed
        if t._version != version:  # the check autograd makes without hooks
            raise RuntimeError(
                "one of the tensors saved for backward has been modified by an inplace operation (its version is "
                f"{t._version}, {version} when it was saved; measured by deq_core.saved_tensor_bytes)"
            )
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn()
    return out, total


class _LiveStorages(TorchDispatchMode):
    """While active, tracks the storages that ATen ops create (outputs sharing no storage with the op's inputs) until
    they are freed (a weakref finalizer on the storage), and the peak of their total size."""

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}  # storage key -> its bytes
        self._finalizers: dict[int, weakref.finalize] = {}

    def _release(self, key: int) -> None:
        self.current -= self._live.pop(key)
        del self._finalizers[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = None
        for t in tree_flatten(out)[0]:
            storage = _storage(t)
            if storage is None:
                continue
            key, nbytes = _key(storage), storage.nbytes()
            if key in self._live:  # an output aliasing a tracked storage, possibly resized (out=, resize_)
                self.current += nbytes - self._live[key]
                self._live[key] = nbytes
                continue
            if inputs is None:
                inputs = {_key(s) for s in map(_storage, tree_flatten((args, kwargs))[0]) if s is not None}
            if key in inputs:  # a view of, or an in-place op on, a storage that existed before fn
                continue
            self._live[key] = nbytes
            self.current += nbytes
            self._finalizers[key] = weakref.finalize(storage, self._release, key)
        self.peak = max(self.peak, self.current)
        return out

    def stop(self) -> None:
        """Forget the storages still alive (their finalizers would otherwise outlive the measurement)."""
        for finalizer in self._finalizers.values():
            finalizer.detach()
        self._finalizers.clear()
        self._live.clear()


def peak_live_bytes(fn: Callable[[], T]) -> tuple[T, int]:
    """Run ``fn`` (e.g. a whole training step, or a solve under no_grad) and return ``(fn(), bytes)``: the largest
    total size of the tensor storages that were created during ``fn`` and alive at the same time.

    Tensors that existed before ``fn`` (parameters, inputs, a ``.grad`` accumulated into in place) are not counted;
    storages created during ``fn`` are counted while they are alive, including the result, gradients that stay in
    ``.grad`` and anything ``fn`` keeps. For a DEQ training step this is the activations saved for backward plus the
    solver's buffers (Anderson/Broyden histories), f's temporaries and the backward pass with its adjoint solve.

    Seen: every tensor an ATen op returns on any device (CPU, CUDA, meta, ...), through a
    :class:`~torch.utils._python_dispatch.TorchDispatchMode`; that includes the ops autograd runs in ``backward()``
    (its worker threads inherit the mode with the thread-local state) and inside custom autograd Functions, and a
    tracked storage grown by ``resize_`` or an ``out=`` argument. Not seen: memory an op uses internally and frees
    before returning (kernel workspaces, e.g. cuDNN's), tensors made without an ATen op (``torch.tensor`` /
    ``torch.as_tensor`` from Python data, ``torch.from_numpy``), the growth of a storage that existed before ``fn``,
    ops run in threads that do not inherit the mode (threads started by ``fn``, data-loader workers), allocator
    overhead, and anything that is not a tensor. Every op costs an extra Python call: do not time ``fn`` under this
    measurement.
    """
    tracker = _LiveStorages()
    try:
        with tracker:
            out = fn()
    finally:
        tracker.stop()
    return out, tracker.peak
