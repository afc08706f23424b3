"""``Pipeline(cuda_graph=True)``: a recorded call replays what an eager pipeline with the same seed
computes, call for call (that a replay does not sync: tests/test_cuda.py). The CUDA checks skip
without a GPU; the rest runs everywhere."""

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch

import gpuaug as ga

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# Changes of a pipeline's settings that a recorded call bakes in (ops() order: Normalize last).
SETTINGS_CHANGES = (
    lambda p: p.half(), lambda p: setattr(p, "channels_last", True), lambda p: setattr(p.ops[1], "p", 1.0),
    lambda p: p.float(), lambda p: p.ops[-1].std.mul_(1.5),
    lambda p: p.ops[-1].load_state_dict({"mean": torch.tensor([0.3, 0.4, 0.5]), "std": torch.tensor([0.2, 0.3, 0.1])}),
)


def ops():
    return [ga.RandomResizedCrop(224), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
            ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.2), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]


def batch(photos, n=16, size=(375, 500)):
    return torch.stack([torch.nn.functional.interpolate(photos[i % len(photos)][None].float(), size=size)[0]
                        for i in range(n)]).round().to(torch.uint8)


def test_cuda_graph_is_a_bool_kept_by_copies_and_ignored_on_the_cpu(photos):
    with pytest.raises(TypeError, match="cuda_graph must be True or False, got 'yes'"):
        ga.Pipeline(*ops(), cuda_graph="yes")
    x = batch(photos, 4, (60, 80))
    graphed = ga.Pipeline(*ops(), device="cpu", seed=4, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cpu", seed=4)
    assert "cuda_graph=True" in repr(graphed) and "cuda_graph" not in repr(eager)
    for _ in range(3):
        assert torch.equal(graphed(x), eager(x))
    for other in (copy.deepcopy(graphed), pickle.loads(pickle.dumps(graphed))):
        assert other.cuda_graph and other(x).shape == (4, 3, 224, 224)


@cuda
def test_replays_equal_an_eager_pipeline_with_the_same_seed_call_for_call(photos):
    x = batch(photos).cuda()
    ragged = [p[:, :300, :400].cuda() for p in photos]
    graphed = ga.Pipeline(*ops(), device="cuda", seed=11, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cuda", seed=11)
    kept = []
    for call in range(6):
        if call == 3:  # an eager call in between (ragged batches are not recorded) moves both streams alike
            assert torch.equal(graphed(ragged), eager(ragged))
        out, params = graphed(x, return_params=True)
        ref, ref_params = eager(x, return_params=True)
        assert torch.equal(out, ref), call
        for p, q in zip(params, ref_params):
            assert p.keys() == q.keys() and all(torch.equal(p[k], q[k]) for k in p)
        kept.append((out, out.clone()))
    assert len(graphed._graphs._graphs) == 1
    for out, saved in kept:  # each call's output is its own: later replays did not overwrite it
        assert torch.equal(out, saved)
    assert not torch.equal(kept[-1][0], kept[-2][0])
    # The params a replay returns replay to the same output (eagerly), and keep the sizes they were drawn for.
    assert torch.equal(graphed(x, params=params), out)
    with pytest.raises(ValueError, match="drawn for"):
        graphed(x[:, :, :200, :300].contiguous(), params=params)


@cuda
def test_two_shapes_a_reseed_and_a_cpu_batch(photos):
    small, large = batch(photos, 8, (200, 260)), batch(photos, 16)
    graphed = ga.Pipeline(*ops(), device="cuda", seed=2, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cuda", seed=2)
    for x in (small, large, small.cuda(), large.cuda(), small.cuda(), large, small.pin_memory()):
        assert torch.equal(graphed(x), eager(x))
    graphed.manual_seed(5)
    eager.manual_seed(5)
    for _ in range(3):
        assert torch.equal(graphed(large), eager(large))
    clips = large.view(4, 4, 3, 375, 500).cuda()
    for _ in range(3):
        assert torch.equal(graphed(clips), eager(clips))
    for change in SETTINGS_CHANGES:  # each records anew: the values of the new settings
        change(graphed)
        change(eager)
        for _ in range(3):
            out = graphed(large)
            assert torch.equal(out, eager(large)) and out.dtype == eager.compute_dtype()


@cuda
def test_a_failed_recording_runs_eagerly_with_one_warning(photos, monkeypatch):
    x = batch(photos, 4).cuda()
    graphed = ga.Pipeline(*ops(), device="cuda", seed=1, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cuda", seed=1)
    assert torch.equal(graphed(x), eager(x))

    class Refuses:
        def register_generator_state(self, generator):
            raise RuntimeError("no graphs here")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Refuses)
    with pytest.warns(RuntimeWarning, match="recording a CUDA graph .* failed .*no graphs here"):
        assert torch.equal(graphed(x), eager(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(graphed(x), eager(x))


# ---- the small host values a call needs are copied to the device once (what lets a call be recorded)


def _host_copies(monkeypatch, call) -> int:
    """How many host arrays ``call()`` made tensors (each one a host-to-device copy on CUDA)."""
    count, from_numpy = [0], torch.from_numpy

    def counted(array):
        count[0] += 1
        return from_numpy(array)

    monkeypatch.setattr(torch, "from_numpy", counted)
    call()
    monkeypatch.setattr(torch, "from_numpy", from_numpy)
    return count[0]


@pytest.mark.parametrize("steps", [
    lambda: ops(),
    lambda: [ga.RandomCrop(48, padding=4, fill=(0.1, 0.2, 0.3)), ga.RandomRotation(20, fill=0.5), ga.RandomVerticalFlip(),
             ga.CenterCrop(40)],
    lambda: [ga.Resize((50, 70)), ga.RandomCrop((44, 60), pad_if_needed=True), ga.RandomHorizontalFlip()],
], ids=["README", "crop fill rotation", "resize crop"])
def test_a_batch_of_one_size_copies_no_host_values_after_its_first_call(photos, monkeypatch, steps):
    from gpuaug.transforms import _base

    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)  # the CUDA code path, on the CPU
    # Kept values are shared by every pipeline of the process: start with none, so that the first
    # call's count does not depend on which tests ran before (run alone, it once failed at 10 > 8).
    monkeypatch.setattr(_base, "_CONSTANTS", {})
    x = batch(photos, 6, (60, 80))
    pipe, again = ga.Pipeline(*steps(), device="cpu", seed=3), ga.Pipeline(*steps(), device="cpu", seed=3)
    assert _host_copies(monkeypatch, lambda: pipe(x)) <= 12  # README pipeline: 10 (2026-12-06)
    out = []
    assert _host_copies(monkeypatch, lambda: out.append(pipe(x))) == 0
    again(x)
    assert torch.equal(out[0], again(x))  # the kept values are the values


def test_kept_values_are_never_changed_in_place(photos, monkeypatch):
    """Every op and composition of tests/generators.py, on the CUDA code path and the CPU's, twice:
    each kept device value still holds the host values it was kept for."""
    import random

    from generators import composition_ops, corner_ops, more_composition_ops
    from gpuaug.transforms import _base

    for own in (False, True):
        monkeypatch.setattr(ga.cpu, "OWN_PATH", own)
        for case in range(30):
            rng = random.Random(case)
            steps = (composition_ops, more_composition_ops, corner_ops)[case % 3](rng)
            x = torch.stack([p[:, :40, :48] for p in photos])
            try:
                pipe = ga.Pipeline(*steps, device="cpu", seed=case)
                pipe(x)
                pipe(x)
            except ValueError:
                continue
    assert len(_base._CONSTANTS) > 10
    for (device, dtype, values), kept in _base._CONSTANTS.items():
        assert kept.device == torch.device(device)
        assert torch.equal(kept, torch.from_numpy(np.array(values, dtype=dtype))), (values, kept)


# ---- the recording logic on the CPU: a stand-in for torch's CUDA graphs


class _StandInGraph:
    """Stands in for ``torch.cuda.CUDAGraph`` on the CPU, as torch's behaves: recording computes
    nothing and draws nothing (the generator's state is put back), a replay runs the recorded
    call again, drawing from the generator where it stands, into the recorded output tensors."""

    def __init__(self):
        self.generators, self.call, self.result = [], None, None

    def register_generator_state(self, generator):
        self.generators.append(generator)

    def replay(self):
        out, params = self.call()
        self.result[0].copy_(out)
        for mine, new in zip(self.result[1], params):
            for k in mine:
                mine[k].copy_(new[k])


@pytest.fixture
def stand_in_graphs(monkeypatch):
    import contextlib

    from gpuaug.pipeline import Pipeline

    made = []

    @contextlib.contextmanager
    def record(graph, capture_error_mode="global"):
        assert capture_error_mode == "thread_local" and len(graph.generators) == 1
        state, real = graph.generators[0].get_state(), Pipeline._forward

        def recorded(pipe, images, params, return_params):
            graph.result = real(pipe, images, params, return_params)
            graph.call = lambda: real(pipe, images, None, True)
            return graph.result

        monkeypatch.setattr(Pipeline, "_forward", recorded)
        try:
            yield
        finally:
            monkeypatch.setattr(Pipeline, "_forward", real)
            graph.generators[0].set_state(state)
        made.append(graph)

    class Stream:
        def wait_event(self, event):
            pass

    class Event:
        def record(self, stream):
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", _StandInGraph)
    monkeypatch.setattr(torch.cuda, "graph", record)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "set_stream", lambda stream: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(Pipeline, "_graphable", lambda self: True)
    return made


def test_recorded_calls_replay_what_eager_calls_draw(photos, stand_in_graphs):
    x = batch(photos, 6, (60, 80))
    ragged = [p[:, :50, :70] for p in photos]
    graphed = ga.Pipeline(*ops(), device="cpu", seed=8, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cpu", seed=8)
    kept = []
    for call in range(6):
        if call == 3:
            assert torch.equal(graphed(ragged), eager(ragged))
        out, params = graphed(x, return_params=True)
        ref, ref_params = eager(x, return_params=True)
        assert torch.equal(out, ref), call
        assert all(torch.equal(p[k], q[k]) for p, q in zip(params, ref_params) for k in p)
        kept.append((out, out.clone()))
    assert len(stand_in_graphs) == 1  # recorded once, at the second call
    assert all(torch.equal(out, saved) for out, saved in kept)  # later replays did not overwrite them
    assert torch.equal(graphed(x, params=params), out)
    # The copies keep the sizes they were drawn for: refused by them (on a GPU, where the values are
    # not read), not only by the CPU's check of the boxes' values ("params drawn for ..., or edited?").
    with pytest.raises(ValueError, match="params for RandomResizedCrop were drawn for images of other sizes"):
        graphed(x[:, :, :40, :50].contiguous(), params=params)


def test_copies_of_a_graphed_pipeline_record_graphs_of_their_own(photos, stand_in_graphs):
    """A deep copy or a pickled copy (same process: it goes on with the original's stream) warms
    up, records a graph of its own and replays what eager draws; the original replays on."""
    x = batch(photos, 3, (50, 60))
    graphed = ga.Pipeline(*ops(), device="cpu", seed=2, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cpu", seed=2)
    for _ in range(2):
        assert torch.equal(graphed(x), eager(x))
    for copied in (copy.deepcopy(graphed), pickle.loads(pickle.dumps(graphed))):
        reference = copy.deepcopy(eager)
        for _ in range(3):
            assert torch.equal(copied(x), reference(x))
    for _ in range(2):  # the original still replays its own graph
        assert torch.equal(graphed(x), eager(x))
    assert len(stand_in_graphs) == 3  # the original's, then one for each copy, at its second call


def test_the_least_recently_used_graph_is_dropped_first(photos, stand_in_graphs):
    from gpuaug import cuda_graph

    graphed = ga.Pipeline(*ops(), device="cpu", seed=9, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cpu", seed=9)
    first, *others = [batch(photos, 2, (30 + 2 * i, 40)) for i in range(cuda_graph.KEPT + 1)]
    for x in [first, *others[:-1]]:  # KEPT shapes, each eager then recorded
        for _ in range(2):
            assert torch.equal(graphed(x), eager(x))
    assert torch.equal(graphed(first), eager(first))  # the first recorded, used last
    for x in (others[-1], others[-1], first):  # one more shape: others[0], not first, is dropped
        assert torch.equal(graphed(x), eager(x))
    assert len(stand_in_graphs) == cuda_graph.KEPT + 1


def test_inputs_cycling_through_more_shapes_than_kept_stop_recording(photos, stand_in_graphs):
    from gpuaug import cuda_graph

    graphed = ga.Pipeline(*ops(), device="cpu", seed=6, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cpu", seed=6)
    shapes = [batch(photos, 2, (30 + 2 * i, 40)) for i in range(cuda_graph.KEPT + 1)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning issued, not once per line
        for _ in range(8):  # least recently used first: each shape's graph is gone when it comes back
            for x in shapes:
                assert torch.equal(graphed(x), eager(x))
    # Each shape once, then the re-recordings allowed; eager from then on, said once.
    assert len(stand_in_graphs) == cuda_graph.KEPT + 1 + cuda_graph.RERECORDINGS
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and f"recorded {cuda_graph.RERECORDINGS} shapes again" in said[0], said


def test_recorded_calls_per_shape_reseeded_kept_and_refused(photos, stand_in_graphs, monkeypatch):
    from gpuaug import cuda_graph

    shapes = [(40 + 4 * i, 60) for i in range(cuda_graph.KEPT + 1)]
    graphed = ga.Pipeline(*ops(), device="cpu", seed=1, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cpu", seed=1)
    for size in shapes + shapes[:1]:  # each shape: eager, then recorded; the first is dropped, then again
        x = batch(photos, 3, size)
        for _ in range(2):
            assert torch.equal(graphed(x), eager(x))
    assert len(stand_in_graphs) == cuda_graph.KEPT + 2
    assert sum(v is not None for v in graphed._graphs._graphs.values()) == cuda_graph.KEPT
    graphed.manual_seed(4)
    eager.manual_seed(4)
    for _ in range(3):  # the graphs were recorded for the old generator: dropped, recorded anew
        assert torch.equal(graphed(x), eager(x))
    assert len(stand_in_graphs) == cuda_graph.KEPT + 3
    # Settings a recording bakes in: changed after it, the pipeline records anew (the stand-in
    # replays whatever the settings; tests/test_cuda_graph.py's CUDA test checks the values).
    for change in SETTINGS_CHANGES:
        recorded = len(stand_in_graphs)
        change(graphed)
        change(eager)
        for _ in range(3):
            out = graphed(x)
            assert torch.equal(out, eager(x)) and out.dtype == eager.compute_dtype()
        assert len(stand_in_graphs) == recorded + 1
    # Other layouts of one shape: each its own graph, an expanded batch (repeated memory) included.
    for layout in (x.contiguous(memory_format=torch.channels_last), x[:1].expand(3, -1, -1, -1), x.flip(0),
                   (x / 255).requires_grad_()):
        for _ in range(3):
            assert torch.equal(graphed(layout), eager(layout))

    def refuses(self, generator):
        raise RuntimeError("no graphs here")

    monkeypatch.setattr(_StandInGraph, "register_generator_state", refuses)
    y = batch(photos, 2, (30, 30))
    assert torch.equal(graphed(y), eager(y))
    with pytest.warns(RuntimeWarning, match=r"recording a CUDA graph for input \(2, 3, 30, 30\) .*no graphs here"):
        assert torch.equal(graphed(y), eager(y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(graphed(y), eager(y))


def test_a_recording_refused_part_way_leaves_the_stream_and_the_draws_as_they_were(photos, stand_in_graphs,
                                                                                  monkeypatch):
    """What torch does when the device refuses a recording part way (an operation not allowed
    while recording): ``capture_end`` raises before it ends the recording on the host, so the
    generator is left moved (in torch: in recording mode, each later draw fails) and the thread's
    stream is the recording's. The stand-in moves the generator and switches the stream likewise."""
    import contextlib

    class Stream:
        def wait_event(self, event):
            pass

    main, side, set_to = Stream(), Stream(), []
    current = [main]

    normal, refusals = torch.cuda.graph, [1]

    @contextlib.contextmanager
    def refused_part_way(graph, capture_error_mode="global"):
        if not refusals:
            with normal(graph, capture_error_mode):
                yield
            return
        refusals.pop()
        current[0] = side
        graph.generators[0].manual_seed(12345)
        yield
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "graph", refused_part_way)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[0])
    monkeypatch.setattr(torch.cuda, "set_stream", lambda stream: (set_to.append(stream), current.__setitem__(0, stream)))

    graphed = ga.Pipeline(*ops(), device="cpu", seed=3, cuda_graph=True)
    eager = ga.Pipeline(*ops(), device="cpu", seed=3)
    x, y = batch(photos, 2, (40, 60)), batch(photos, 2, (30, 30))
    refusals.clear()
    for z in (x, y, y):  # x eager; y eager, then recorded
        assert torch.equal(graphed(z), eager(z))
    recorded = len(stand_in_graphs)
    refusals.append(1)
    with pytest.warns(RuntimeWarning, match="recording a CUDA graph .* failed .*not permitted when stream is capturing"):
        assert torch.equal(graphed(x), eager(x))
    assert set_to == [main] and current[0] is main
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # x eager from now on (never recorded again, though the device would now take it); y's graph,
        # made for the old generator, dropped at once: y records again on its next call, then replays
        for z in (x, y, x, y, y, x, x):
            assert torch.equal(graphed(z), eager(z))
    assert len(stand_in_graphs) == recorded + 1


@cuda
def test_a_recording_refused_part_way_on_the_device(tmp_path):
    """The same on a GPU, for real: a host read inside the recording (refused by the device) must
    leave the pipeline drawing what an eager one draws, on the stream it was called on. In a
    process of its own, in case the device's error is not one it recovers from."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import warnings, torch, gpuaug as ga
        from gpuaug.pipeline import Pipeline
        ops = lambda: [ga.RandomResizedCrop(64), ga.RandomRotation(15), ga.ColorJitter(0.4, 0.4, 0.4, 0.1)]
        x = torch.randint(0, 256, (4, 3, 80, 100), dtype=torch.uint8, device="cuda")
        graphed = ga.Pipeline(*ops(), device="cuda", seed=5, cuda_graph=True)
        eager = ga.Pipeline(*ops(), device="cuda", seed=5)
        stream = torch.cuda.current_stream()
        assert torch.equal(graphed(x), eager(x))
        finish = Pipeline._finish
        def reads(self, out, *args):  # a host read: not allowed while recording
            if torch.cuda.is_current_stream_capturing():
                out.sum().item()
            return finish(self, out, *args)
        Pipeline._finish = reads
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = graphed(x)
        assert any("recording a CUDA graph" in str(w.message) for w in caught), [str(w.message) for w in caught]
        assert torch.cuda.current_stream() == stream, (torch.cuda.current_stream(), stream)
        assert torch.equal(out, eager(x))
        for _ in range(3):
            assert torch.equal(graphed(x), eager(x))
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-2000:] + run.stderr[-4000:]


def test_kept_values_stay_kept_past_the_bound(monkeypatch):
    """A recorded graph reads the kept values where they are: none is ever dropped (past the
    bound, new values are copied each time instead)."""
    from gpuaug.transforms import _base

    monkeypatch.setattr(_base, "_CONSTANTS", {})
    monkeypatch.setattr(_base, "_CONSTANTS_KEPT", 8)
    first = _base.to_device((1.0, 2.0), "cpu")
    for i in range(20):
        assert torch.equal(_base.to_device((float(i), 3.0), "cpu"), torch.tensor([float(i), 3.0]))
    assert _base.to_device((1.0, 2.0), "cpu") is first and len(_base._CONSTANTS) == 8


def test_restored_rng_state_replays_what_eager_calls_draw_from_it(photos, stand_in_graphs):
    """set_rng_state gives the pipeline a new generator: graphs recorded for the old one record
    again, and the calls after it draw from the restored state, as an eager pipeline's do."""
    x = batch(photos, 4, (60, 80))
    graphed = ga.Pipeline(*ops(), device="cpu", seed=3, cuda_graph=True)
    for _ in range(3):
        graphed(x)
    saved = graphed.get_rng_state()
    after = [graphed(x) for _ in range(3)]
    graphed.set_rng_state(saved)
    eager = ga.Pipeline(*ops(), device="cpu", seed=0).set_rng_state(saved)
    for out in after:
        again = graphed(x)
        assert torch.equal(again, out) and torch.equal(again, eager(x))
    assert len(stand_in_graphs) == 2  # recorded again for the restored generator
