"""CUDA-graph replay of a pipeline call: ``Pipeline(..., cuda_graph=True)``.

A pipeline call on CUDA launches ~75 small kernels (draws, the plan's per-sample math) before
the few that touch pixels, and on a fast GPU the host's time issuing them is most of the call
(H200, batch 256, 2026-12-04: ~2.1 ms of host work for ~1.6 ms of kernels). A CUDA graph
records the whole call once for a batch of one shape and replays it with one launch.

For each input key (shape, strides, dtype, and the pipeline's settings: its output dtype and
layout, ``GPUAUG_TRITON``, its ops' settings and buffers, so that ``pipeline.half()``, a changed
op or a loaded Normalize records anew: :meth:`Pipeline._settings`) on the pipeline's CUDA device:

1. the first call runs eagerly (it warms what a capture cannot do: Triton compiles, the small
   constants copied to the device once, cuBLAS set-up);
2. the second call records the call on a static copy of its input, then replays it;
3. later calls copy their input into the static one, replay, and return a copy of the output.

The pipeline's generator is registered with each graph, so a replay draws what an eager call
would draw at that point of the generator's stream: a graphed pipeline gives the outputs an
eager one with the same seed gives, call for call, eager calls (ragged batches) in between
included. The returned output (and params) are copies: the graph's own buffers are overwritten by
the next replay. Where a recording fails, the key runs eagerly from then on, with one warning; a
recording the device refused part way leaves the thread's stream and the draws as they were.

Kept: up to :data:`KEPT` graphs per pipeline, the least recently used dropped first; each holds a
copy of its input batch and the call's intermediates in its own memory pool. Graphs are dropped
when the pipeline's generator changes (``manual_seed``, ``to``). Inputs that cycle through more
shapes than that would record on most calls: after :data:`RERECORDINGS` recordings of dropped
shapes, shapes not held run eagerly (one warning).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch
from torch import Tensor

from .user_warnings import warn

KEPT = 4
# Recordings of shapes dropped earlier (inputs cycling through more shapes than are kept): past
# this many, shapes not held run eagerly (a recording costs a device sync and a garbage collection).
RERECORDINGS = 8


class _Graph:
    """One recorded call: the static input it reads, the outputs it writes, the event after the
    last copy of them (a replay on another stream waits for it)."""

    def __init__(self, graph, static_in: Tensor, out: Tensor, params: list, generator: torch.Generator):
        self.graph, self.static_in, self.out, self.params, self.generator = graph, static_in, out, params, generator
        self.done = torch.cuda.Event()  # waiting on it before its first record waits for nothing


class GraphedCalls:
    """The graphs of one pipeline, by input key. ``run(pipeline, images, return_params)`` -> what
    ``pipeline(images, return_params=...)`` returns, or ``None`` where this input is not for a
    graph (the caller then runs eagerly). Copies and pickles of it hold no graphs."""

    def __init__(self):
        self._graphs: OrderedDict = OrderedDict()  # key -> _Graph, or None: runs eagerly
        self._seen: set = set()
        self._dropped: set = set()  # keys whose graph the LRU dropped
        self._rerecorded = 0
        self._lock = threading.Lock()

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        GraphedCalls.__init__(self)

    def __deepcopy__(self, memo):
        return GraphedCalls()

    @torch.no_grad()  # float input that requires grad: the copy into the graph's input records nothing
    def run(self, pipeline, images: Tensor, return_params: bool):
        key = (tuple(images.shape), images.stride(), images.dtype, images.device, pipeline._settings())
        device = pipeline.device
        with self._lock, torch.cuda.device(device):
            generator = pipeline._get_generator()
            entry = self._graphs.get(key)
            if entry is not None and entry.generator is not generator:  # reseeded: recorded for another
                self._graphs.clear()
                self._seen.clear()
                self._dropped.clear()
                entry = None
            if entry is None:
                if key in self._graphs:  # recording failed before
                    return None
                if key not in self._seen:  # the first call of this key: eager, as a warm-up
                    self._seen.add(key)
                    return None
                if key in self._dropped:
                    if self._rerecorded == RERECORDINGS:
                        warn(f"gpuaug: cuda_graph recorded {RERECORDINGS} shapes again after dropping them "
                             f"(the input cycles through more than {KEPT} shapes): shapes it does not hold "
                             "run eagerly from now on")
                    self._rerecorded += 1
                    if self._rerecorded > RERECORDINGS:
                        return None
                entry = self._record(pipeline, key, images, generator)
                if entry is None:
                    return None
            self._graphs.move_to_end(key)
            stream = torch.cuda.current_stream(device)
            stream.wait_event(entry.done)  # another stream's copy of the last outputs may still read them
            entry.static_in.copy_(images, non_blocking=True)
            entry.graph.replay()
            out = entry.out.clone()
            params = [{k: _copy(v) for k, v in p.items()} for p in entry.params] if return_params else None
            entry.done.record(stream)
        return (out, params) if return_params else out

    def _record(self, pipeline, key, images: Tensor, generator: torch.Generator) -> _Graph | None:
        while len([v for v in self._graphs.values() if v is not None]) >= KEPT:
            oldest = next(k for k, v in self._graphs.items() if v is not None)
            del self._graphs[oldest]
            self._dropped.add(oldest)
        # The input's layout where it is dense (channels-last stays so), else contiguous (an
        # expanded batch's repeated memory cannot be copied into).
        static_in = torch.empty_like(images, device=pipeline.device).copy_(images)  # real values, recorded
        stream, state = torch.cuda.current_stream(pipeline.device), generator.get_state()  # (host values)
        graph = torch.cuda.CUDAGraph()
        try:
            graph.register_generator_state(generator)
            # thread_local: other threads (a DeviceLoader's copies) may go on using CUDA meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                out, params = pipeline._forward(static_in, None, True)
        except Exception as error:  # noqa: BLE001 - any recording failure: run this key eagerly, loudly
            # A recording the device refused part way (an operation not allowed while recording)
            # fails in torch's capture_end, which then skips what ends a recording on the host
            # (torch 2.11-2.14): the thread's stream stays the recording's side stream, and the
            # generator stays in recording mode, so every later draw from it would fail ("Offset
            # increment outside graph capture encountered unexpectedly"). Both are put back: the
            # stream, and the generator as a new one at the state it had before the recording.
            torch.cuda.set_stream(stream)
            pipeline._generator = fresh = torch.Generator(device=generator.device)
            fresh.set_state(state)
            for k in [k for k, v in self._graphs.items() if v is not None]:
                del self._graphs[k]  # recorded for the old generator (failures stay marked)
            self._graphs[key] = None
            warn(f"gpuaug: recording a CUDA graph for input {tuple(images.shape)} {images.dtype} failed "
                 f"({type(error).__name__}: {error}); such batches run eagerly")
            return None
        entry = self._graphs[key] = _Graph(graph, static_in, out, params, generator)
        return entry


def _copy(t: Tensor) -> Tensor:
    """A copy of a recorded param tensor with what the draw set on it (the sizes crop boxes were
    drawn for: host values)."""
    out = t.clone()
    out.__dict__.update(getattr(t, "__dict__", {}))
    return out
