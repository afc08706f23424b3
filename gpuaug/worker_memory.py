"""Shared memory that a DataLoader worker reuses for the batches it sends.

A batch crosses from a worker to the main process in shared memory. Made fresh for every batch of
256 ~500x375 images (140 MB), on this project's CPU it cost the worker ~31 ms to create and ~24 ms
of page faults to fill, and whichever process dropped it last ~22-34 ms to free: the main
process, the one that drives the GPU, under the GIL. Here each worker keeps up to
:data:`MAX_SLOTS` buffers ("slots") and refills them. A slot is lent with a batch of
:func:`gpuaug.data.collate`'s and comes back only when the main process holds no tensor on it:
the main process keeps a weak reference to each storage it received and, when one has died,
clears that slot's flag in memory it shares with the worker. With every slot lent, a worker makes
a fresh buffer, as before. A batch the main process pickles (a ``Batch`` or ``PackedImages`` sent
on to another process, which may read it after this one let go) is given away: its worker forgets
that slot. A bare tensor of a batch sent on is not seen (the README says to clone it).
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef

FREE, LENT, GIVEN_AWAY = 0, 1, 2  # a slot's flag
# Per worker: torch's default prefetching (2) + the batch in use + a batch's lag in coming back.
# GPUAUG_WORKER_SLOTS=0 (inherited by workers of any start method) makes a fresh buffer per batch.
def _slots_setting() -> int:
    value = os.environ.get("GPUAUG_WORKER_SLOTS", "6")
    if not value.strip().isdigit():
        raise ValueError(f"GPUAUG_WORKER_SLOTS must be a whole number >= 0 (buffers per worker), got {value!r}")
    return int(value)


MAX_SLOTS = _slots_setting()
_PAGE = 4096

# Worker side (each worker process has its own): the slots, and their flags in shared memory
# (int32, 1 while lent), which the main process clears. ``_pid`` is the process they belong to:
# a forked process inherits them and must not lend them too.
_slots: list[torch.UntypedStorage | None] = []
_flags: Tensor | None = None
_pid: int | None = None
_reusing = False
_taken: list[int] = []  # slots taken within the current reusing() block

# Main side: (weak reference to a received slot's storage, that worker's flags, slot index), of
# process ``_lent_pid`` (a forked child does not hold what its parent received).
_lent: list[tuple[StorageWeakRef, Tensor, int]] = []
_lent_pid: int | None = None
_lent_lock = threading.Lock()


def _own_lent() -> list[tuple[StorageWeakRef, Tensor, int]]:
    global _lent, _lent_pid
    if _lent_pid != os.getpid():
        _lent, _lent_pid = [], os.getpid()
    return _lent


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
        flags = _flags  # made before any slot was taken
        if flags is not None:
            for i in _taken:
                flags[i] = FREE
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
    return torch.empty(0, dtype=like.dtype, device="cpu").set_(storage, 0, (numel,), (1,))


def _take_slot(nbytes: int) -> torch.UntypedStorage | None:
    global _slots, _flags, _pid
    if _flags is None or _pid != os.getpid():
        _slots, _flags, _pid = [], torch.zeros(MAX_SLOTS, dtype=torch.int32, device="cpu").share_memory_(), os.getpid()
    flags = _flags.tolist()[:len(_slots)]
    for i, flag in enumerate(flags):
        if flag == GIVEN_AWAY:  # another process may read it: forget it, never write it again
            _slots[i], flags[i] = None, FREE
            _flags[i] = FREE
    free = [i for i, flag in enumerate(flags) if flag == FREE]
    room = {i: slot.nbytes() for i in free if (slot := _slots[i]) is not None}
    fits = [i for i, n in room.items() if n >= nbytes]
    # A batch bigger than every free slot replaces one (a ragged batch's size varies by a few
    # percent: room for 1/16 more); a new slot only when none is free, so a worker keeps about as
    # many as it has batches out.
    size = max(-(-(nbytes + nbytes // 16) // _PAGE), 1) * _PAGE
    if fits:
        i = min(fits, key=room.__getitem__)
    elif free:
        i = free[0]
        _slots[i] = torch.UntypedStorage._new_shared(size)
    elif len(_slots) < min(MAX_SLOTS, len(_flags)):  # MAX_SLOTS as it was when the flags were made, at most
        i = len(_slots)
        _slots.append(torch.UntypedStorage._new_shared(size))
    else:
        return None
    _flags[i] = LENT
    _taken.append(i)
    return _slots[i]


def lent_slot(t: Tensor) -> tuple[Tensor, int] | None:
    """In a worker: ``(flags, index)`` of the lent slot that ``t`` lies in, else None."""
    if not isinstance(t, Tensor) or torch.utils.data.get_worker_info() is None or _flags is None or _pid != os.getpid():
        return None
    ptr = t.untyped_storage().data_ptr()
    return next(((_flags, i) for i, s in enumerate(_slots)
                 if s is not None and s.data_ptr() == ptr and int(_flags[i]) == LENT), None)


def received(t: Tensor, flags: Tensor, index: int) -> None:
    """In the main process: ``t`` (just unpickled) lies in slot ``index`` of the worker whose flags
    are ``flags``. Slots whose storages have died since are handed back."""
    with _lent_lock:
        lent = _own_lent()
        alive = []
        for ref, f, i in lent:
            if ref.expired():
                f[i] = FREE
            else:
                alive.append((ref, f, i))
        alive.append((StorageWeakRef(t.untyped_storage()), flags, index))
        lent[:] = alive


def given_away(t: Tensor) -> None:
    """In the main process: ``t`` (what it received) is being pickled, perhaps for another
    process, which would read the buffer after this one drops it: its worker must never reuse it.
    (gpuaug's batch types call this; a bare tensor of a batch sent on is not seen: clone it.)"""
    if not isinstance(t, Tensor) or not _lent:
        return
    impl = t.untyped_storage()._cdata
    with _lent_lock:
        lent = _own_lent()
        for k, (ref, f, i) in enumerate(lent):
            if ref.cdata == impl and not ref.expired():
                f[i] = GIVEN_AWAY
                del lent[k]
                return
