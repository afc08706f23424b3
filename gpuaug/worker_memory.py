"""Shared memory that a DataLoader worker reuses for the batches it sends.

A batch crosses from a worker to the main process in shared memory. Made fresh for every batch of
256 ~500x375 images (140 MB), on this project's CPU it cost the worker ~31 ms to create and ~24 ms
of page faults to fill, and whichever process dropped it last ~22-34 ms to free: the main
process, the one that drives the GPU, under the GIL. Here each worker keeps up to
:data:`MAX_SLOTS` buffers ("slots") and refills them. A slot is lent with a batch of
:func:`gpuaug.data.collate`'s and comes back only when the main process holds no tensor on it:
the main process keeps a weak reference to each storage it received and, when one has died,
clears that slot's flag in memory it shares with the worker. With every slot lent, a worker makes
a fresh buffer, as before.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef

MAX_SLOTS = 6  # per worker: torch's default prefetching (2) + the batch in use + a batch's lag in coming back
_PAGE = 4096

# Worker side (each worker process has its own): the slots, and their flags in shared memory
# (int32, 1 while lent), which the main process clears. ``_pid`` is the process they belong to:
# a forked process inherits them and must not lend them too.
_slots: list[torch.UntypedStorage] = []
_flags: Tensor | None = None
_pid: int | None = None
_reusing = False
_taken: list[int] = []  # slots taken within the current reusing() block

# Main side: (weak reference to a received slot's storage, that worker's flags, slot index).
_lent: list[tuple[StorageWeakRef, Tensor, int]] = []
_lent_lock = threading.Lock()


@contextmanager
def reusing():
    """Within it, :func:`output` in a worker lends slots (``collate`` uses it: its batches come back
    to :func:`received`; a buffer made by other code would never be returned). Slots taken by a
    block that raises are free again."""
    global _reusing
    _reusing, _taken[:] = True, []
    try:
        yield
    except BaseException:
        for i in _taken:
            _flags[i] = 0
        raise
    finally:
        _reusing = False


def output(like: Tensor, numel: int) -> Tensor | None:
    """In a DataLoader worker, an empty 1-D tensor of ``numel`` elements of ``like``'s dtype in
    shared memory, to collate into (torch's ``default_collate`` does the same): a free slot within
    :func:`reusing`, else fresh memory. Outside a worker (or for a non-CPU ``like``), None."""
    if torch.utils.data.get_worker_info() is None or like.device.type != "cpu":
        return None
    nbytes = numel * like.element_size()
    storage = _take_slot(nbytes) if _reusing else None
    if storage is None:
        storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=like.dtype).set_(storage, 0, (numel,))


def _take_slot(nbytes: int) -> torch.UntypedStorage | None:
    global _slots, _flags, _pid
    if _flags is None or _pid != os.getpid():
        _slots, _flags, _pid = [], torch.zeros(MAX_SLOTS, dtype=torch.int32).share_memory_(), os.getpid()
    free = [i for i, lent in enumerate(_flags.tolist()[:len(_slots)]) if not lent]
    fits = [i for i in free if _slots[i].nbytes() >= nbytes]
    # A batch bigger than every free slot replaces one (ragged batches vary: room for 25% more);
    # a new slot only when none is free, so a worker keeps about as many as it has batches out.
    size = max(-(-(nbytes + nbytes // 4) // _PAGE), 1) * _PAGE
    if fits:
        i = min(fits, key=lambda i: _slots[i].nbytes())
    elif free:
        i = free[0]
        _slots[i] = torch.UntypedStorage._new_shared(size)
    elif len(_slots) < MAX_SLOTS:
        i = len(_slots)
        _slots.append(torch.UntypedStorage._new_shared(size))
    else:
        return None
    _flags[i] = 1
    _taken.append(i)
    return _slots[i]


def lent_slot(t: Tensor) -> tuple[Tensor, int] | None:
    """In a worker: ``(flags, index)`` of the lent slot that ``t`` lies in, else None."""
    if not isinstance(t, Tensor) or torch.utils.data.get_worker_info() is None or _flags is None or _pid != os.getpid():
        return None
    ptr = t.untyped_storage().data_ptr()
    return next(((_flags, i) for i, s in enumerate(_slots) if s.data_ptr() == ptr and int(_flags[i])), None)


def received(t: Tensor, flags: Tensor, index: int) -> None:
    """In the main process: ``t`` (just unpickled) lies in slot ``index`` of the worker whose flags
    are ``flags``. Slots whose storages have died since are handed back."""
    with _lent_lock:
        alive = []
        for ref, f, i in _lent:
            if ref.expired():
                f[i] = 0
            else:
                alive.append((ref, f, i))
        alive.append((StorageWeakRef(t.untyped_storage()), flags, index))
        _lent[:] = alive
