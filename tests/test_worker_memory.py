"""DataLoader workers reuse their shared memory (gpuaug.worker_memory): a buffer goes back to its
worker only when the main process holds nothing on it, so a batch (or a view of one) that the main
process keeps is never written over; with every buffer lent, the worker makes fresh ones."""

import multiprocessing
import os
import subprocess
import sys
import types

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import gpuaug as ga
from conftest import WORKER_TIMEOUT_S
from gpuaug import worker_memory
from gpuaug.data import Encoded, collate


class Numbered(Dataset):
    """Item ``i``: a uint8 image filled with ``i % 251`` (ragged sizes unless ``same_size``), or
    with ``encoded``, bytes of that value as a ``decode="gpu"`` dataset gives them."""

    def __init__(self, n: int, same_size: bool, encoded: bool = False):
        self.n, self.same_size, self.encoded = n, same_size, encoded

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.encoded:
            return Encoded(f"{i}.jpg", torch.full((100 + i % 9,), i % 251, dtype=torch.uint8)), i
        h, w = (20, 30) if self.same_size else (20 + i % 7, 30 + i % 5)
        return torch.full((3, h, w), i % 251, dtype=torch.uint8), i


def _intact(images, labels) -> bool:
    return all(bool((getattr(img, "data", img) == int(y) % 251).all()) for img, y in zip(images, labels))


@pytest.mark.parametrize("same_size, encoded", [(False, False), (True, False), (False, True)],
                         ids=["packed", "stacked", "JPEG bytes"])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_batches_and_views_the_main_process_keeps_are_never_overwritten(monkeypatch, same_size, encoded, method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} not available here")
    seen, flags_kept = [], []  # (worker's flags, slot) of every batch that came in a reused buffer
    received = worker_memory.received

    def record(t, flags, i):
        flags_kept.append(flags)  # kept mapped: one address per worker
        seen.append((flags.data_ptr(), i))
        received(t, flags, i)

    monkeypatch.setattr(worker_memory, "received", record)
    # This process lends buffers of its own first (as if it were a worker): forked workers inherit
    # them and must make their own, not lend the same ones.
    for name, value in (("_slots", []), ("_flags", None), ("_pid", None)):
        monkeypatch.setattr(worker_memory, name, value)
    with monkeypatch.context() as m:
        m.setattr(torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0))
        inherited = [collate([Numbered(9, same_size, encoded)[i] for i in range(4)]) for _ in range(3)]
    assert len(worker_memory._slots) == 3
    loader = DataLoader(Numbered(8 * 60, same_size, encoded), batch_size=8, num_workers=2, collate_fn=collate,
                        timeout=WORKER_TIMEOUT_S, multiprocessing_context=multiprocessing.get_context(method))
    kept_batches, kept_views = [], []
    for k, batch in enumerate(loader):
        assert _intact(batch.images, batch.labels), k
        if k % 9 == 0:
            kept_batches.append(batch)
        elif k % 9 == 4:
            kept_views.append((batch.images[2], batch.labels[2:3]))  # a view into the batch's buffer
    assert all(_intact(b.images, b.labels) for b in kept_batches)
    assert all(_intact([img], y) for img, y in kept_views)
    # Buffers were reused (60 batches, at most 6 buffers a worker), and none lent twice at once.
    # How many of the 60 came in a reused buffer is timing: a slot comes back a batch or two after
    # the main process drops it, and the kept batches pin slots for good (46 on a quiet machine,
    # 39 while another test run loaded both cores, where this asked 40 and failed).
    assert len(seen) >= 24 and len(set(seen)) <= 2 * worker_memory.MAX_SLOTS


def _read_later(batches, go, result):
    sent, labels = batches.get()
    images = sent.images if hasattr(sent, "images") else sent
    go.wait()
    result.put(_intact(images, labels))


@pytest.mark.parametrize("same_size, sent", [(False, "batch"), (True, "batch"), (False, "images")],
                         ids=["packed batch", "stacked batch", "PackedImages"])
def test_a_batch_sent_on_to_another_process_is_never_written_over(same_size, sent):
    """The main process sends a batch on and drops it; the other process reads it later. The
    buffer must not go back to its worker: it would write over what the other process reads."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available here")
    context = multiprocessing.get_context("fork")
    batches, go, result = context.Queue(), context.Event(), context.Queue()
    reader = context.Process(target=_read_later, args=(batches, go, result))
    reader.start()
    try:
        loader = DataLoader(Numbered(8 * 40, same_size), batch_size=8, num_workers=1, collate_fn=collate,
                            timeout=WORKER_TIMEOUT_S, multiprocessing_context=context)
        for k, batch in enumerate(loader):
            if k == 3:
                batches.put((batch, batch.labels.tolist()) if sent == "batch" else (batch.images, batch.labels.tolist()))
        go.set()
        assert result.get(timeout=60)
    finally:
        reader.join(timeout=60)
        if reader.is_alive():
            reader.kill()


def _drop_and_look(held):
    held.clear()  # this child's copies of the parent's batch die here...
    worker_memory.received(torch.zeros(1), torch.zeros(1, dtype=torch.int32), 0)  # ...and it looks


def test_a_forked_child_does_not_hand_back_what_its_parent_holds():
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available here")
    context = multiprocessing.get_context("fork")
    loader = DataLoader(Numbered(8 * 40, False), batch_size=8, num_workers=1, collate_fn=collate,
                        timeout=WORKER_TIMEOUT_S, multiprocessing_context=context)
    batches = iter(loader)
    next(batches), next(batches)
    held = [next(batches)]  # the one reference
    child = context.Process(target=_drop_and_look, args=(held,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    for _ in batches:  # the worker fills its buffers 37 more times
        pass
    assert _intact(held[0].images, held[0].labels)


@pytest.fixture
def in_a_worker(monkeypatch):
    """This process as a DataLoader worker, with no buffers yet."""
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0))
    monkeypatch.setattr(worker_memory, "_slots", [])
    monkeypatch.setattr(worker_memory, "_flags", None)
    monkeypatch.setattr(worker_memory, "_pid", None)
    monkeypatch.setattr(worker_memory, "_lent", [])


def test_a_buffer_is_lent_until_the_main_process_lets_go(in_a_worker):
    # One process plays both sides: the main process's own mapping of a buffer is a tensor of its own.
    like = torch.empty(0, dtype=torch.uint8)
    with worker_memory.reusing():
        first = worker_memory.output(like, 1000)
    assert first.is_shared() and first.numel() == 1000
    flags, index = worker_memory.lent_slot(first)
    received_first = torch.zeros(1000, dtype=torch.uint8)
    worker_memory.received(received_first, flags, index)
    with worker_memory.reusing():
        second = worker_memory.output(like, 1000)
    assert second.data_ptr() != first.data_ptr()  # the first is still lent: the main process holds it
    held_view = received_first[10:]
    del received_first
    worker_memory.received(torch.zeros(1), *worker_memory.lent_slot(second))  # looks again: a view holds it
    assert int(flags[index]) == 1
    del held_view
    worker_memory.received(torch.zeros(1), *worker_memory.lent_slot(second))  # looks again: it died
    assert int(flags[index]) == 0
    with worker_memory.reusing():
        third = worker_memory.output(torch.empty(0, dtype=torch.float32), 200)  # any dtype, in the freed buffer
    assert third.dtype == torch.float32 and third.data_ptr() == first.data_ptr()


def test_all_buffers_lent_gives_fresh_memory_and_a_failed_batch_gives_its_buffer_back(in_a_worker):
    like = torch.empty(0, dtype=torch.uint8)
    with worker_memory.reusing():
        lent = [worker_memory.output(like, 100) for _ in range(worker_memory.MAX_SLOTS)]
        fresh = worker_memory.output(like, 100)
    assert all(worker_memory.lent_slot(t) is not None for t in lent)
    assert fresh.is_shared() and worker_memory.lent_slot(fresh) is None
    worker_memory._flags[0] = 0  # one comes back
    with pytest.raises(RuntimeError), worker_memory.reusing():
        failed = worker_memory.output(like, 100)
        assert failed.data_ptr() == lent[0].data_ptr()
        raise RuntimeError("collate failed after taking a buffer")
    assert int(worker_memory._flags[0]) == 0
    # Bigger than every free buffer: one is replaced by a larger one.
    with worker_memory.reusing():
        big = worker_memory.output(like, 10**6)
    assert big.untyped_storage().nbytes() >= 10**6 and worker_memory.lent_slot(big)[1] == 0


def test_a_batch_takes_the_smallest_free_buffer_it_fits(in_a_worker):
    """Best fit: a small batch leaves the big buffer to the big batches (taking it, the next big
    batch found none and a buffer was made anew); a buffer grown for a batch has room for a
    ragged batch a few percent bigger."""
    like = torch.empty(0, dtype=torch.uint8)

    def buffers_for(*numels) -> list[int]:
        """Where batches of these sizes go (data pointers), taken in one block once every buffer is back."""
        if worker_memory._flags is not None:
            worker_memory._flags[:] = worker_memory.FREE
        with worker_memory.reusing():
            return [worker_memory.output(like, n).untyped_storage().data_ptr() for n in numels]

    small, big = buffers_for(1000, 10**6)
    assert buffers_for(10**6, 1000) == [big, small]
    assert buffers_for(900, 10**6) == [small, big]
    (grown,) = buffers_for(2 * 10**6)  # replaces a buffer
    grown_bytes = next(slot.nbytes() for slot in worker_memory._slots if slot is not None and slot.data_ptr() == grown)
    assert buffers_for(2 * 10**6 * 106 // 100) == [grown]
    assert buffers_for(grown_bytes) == [grown]  # fills it to the byte


def test_only_the_batch_sent_on_is_given_away(in_a_worker):
    """Of two batches the main process holds, pickling one keeps its worker off that one's buffer
    for good; the other's comes back as usual when it is dropped."""
    like = torch.empty(0, dtype=torch.uint8)
    held = []
    for _ in range(2):
        with worker_memory.reusing():
            slot = worker_memory.lent_slot(worker_memory.output(like, 100))
        held.append(torch.zeros(100, dtype=torch.uint8))  # the main process's copy of that batch
        worker_memory.received(held[-1], *slot)
    flags = worker_memory._flags
    worker_memory.given_away(held[1])
    assert flags[:2].tolist() == [worker_memory.LENT, worker_memory.GIVEN_AWAY]
    del held[0]
    worker_memory.received(torch.zeros(1), flags, 5)  # looks again: the first died
    assert flags[:2].tolist() == [worker_memory.FREE, worker_memory.GIVEN_AWAY]


def test_a_fresh_worker_lends_nothing_before_collate_runs():
    """A worker's first output() outside ``reusing()`` (a Dataset packing its own images) takes
    fresh memory, not a slot that would never come back."""
    code = ("import types, torch; from gpuaug import worker_memory as wm\n"
            "torch.utils.data.get_worker_info = lambda: types.SimpleNamespace(id=0)\n"
            "t = wm.output(torch.empty(0, dtype=torch.uint8), 100)\n"
            "print(t.is_shared(), wm.lent_slot(t), len(wm._slots))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.split() == ["True", "None", "0"], run.stdout + run.stderr[-2000:]


class NotStacked(Dataset):
    """After a stacked batch (so the worker has buffers): every file bad (``images`` is an empty
    list), then uint8 and float images (kept as a list: neither stacked nor packed)."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i in (2, 3):
            return ga.data.BadFile(f"{i}.jpg", "empty file (0 bytes)"), i
        return torch.full((3, 4 + (i == 5), 5), i, dtype=torch.float32 if i == 5 else torch.uint8), i


def test_batches_without_a_buffer_cross_from_workers():
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available here")
    loader = DataLoader(NotStacked(), batch_size=2, num_workers=1, collate_fn=collate, timeout=60,  # a batch
                        multiprocessing_context=multiprocessing.get_context("fork"))  # failing to pickle is lost
    (stacked, _, _), (none, _, bad), (mixed, labels, _) = list(loader)
    assert isinstance(stacked, torch.Tensor) and stacked.is_shared()
    assert none == [] and [b.path for b in bad] == ["2.jpg", "3.jpg"]
    assert [t.dtype for t in mixed] == [torch.uint8, torch.float32] and labels.tolist() == [4, 5]
    assert all(bool((t == y).all()) for t, y in zip(mixed, labels))


def test_outside_collate_or_a_worker_nothing_is_lent(in_a_worker, monkeypatch):
    like = torch.empty(0, dtype=torch.uint8)
    assert worker_memory.lent_slot(worker_memory.output(like, 100)) is None  # not within reusing()
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: None)
    with worker_memory.reusing():
        assert worker_memory.output(like, 100) is None
    packed = ga.PackedImages.pack([torch.zeros(3, 2, 2, dtype=torch.uint8), torch.zeros(3, 3, 2, dtype=torch.uint8)])
    assert not packed.flat.is_shared()


def test_no_slots_means_a_fresh_buffer_per_batch(monkeypatch):
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available here")
    monkeypatch.setattr(worker_memory, "MAX_SLOTS", 0)  # forked workers inherit it
    seen = []
    monkeypatch.setattr(worker_memory, "received", lambda *args: seen.append(args))
    loader = DataLoader(Numbered(8 * 6, False), batch_size=8, num_workers=1, collate_fn=collate,
                        timeout=WORKER_TIMEOUT_S, multiprocessing_context=multiprocessing.get_context("fork"))
    assert all(_intact(b.images, b.labels) for b in loader) and not seen


@pytest.mark.parametrize("value, expected", [("0", "0"), ("3", "3"), (" 4\n", "4"), (None, "6"),  # unset: README's default
                                             ("x", "ValueError: GPUAUG_WORKER_SLOTS must be"),
                                             ("-1", "ValueError: GPUAUG_WORKER_SLOTS must be")])
def test_the_number_of_slots_comes_from_the_environment(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "GPUAUG_WORKER_SLOTS"}
    if value is not None:
        env["GPUAUG_WORKER_SLOTS"] = value
    run = subprocess.run([sys.executable, "-c", "import gpuaug; print(gpuaug.worker_memory.MAX_SLOTS)"],
                         env=env, capture_output=True, text=True, timeout=120)
    if expected.isdigit():
        assert run.returncode == 0 and run.stdout.strip() == expected, run.stdout + run.stderr[-2000:]
    else:
        assert run.returncode != 0 and expected in run.stderr, run.stderr[-2000:]


def test_the_file_system_sharing_strategy_too():
    """torch's other way to share memory (named files; macOS's only one)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available here")
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        loader = DataLoader(Numbered(8 * 30, False), batch_size=8, num_workers=2, collate_fn=collate,
                            timeout=WORKER_TIMEOUT_S, multiprocessing_context=multiprocessing.get_context("fork"))
        kept = []
        for k, batch in enumerate(loader):
            assert _intact(batch.images, batch.labels), k
            if k % 7 == 0:
                kept.append(batch)
        assert all(_intact(b.images, b.labels) for b in kept)
    finally:
        torch.multiprocessing.set_sharing_strategy(before)
