"""`gpuaug bench`: the README's main command runs, prints its table last, writes JSON and a PNG."""

import importlib.util
import json
import os
import platform
import subprocess
import sys

import pytest
import torch

import gpuaug as ga
from gpuaug import bench
from gpuaug.cli import main


def test_bench_quick_writes_table_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    assert main(["bench", "--quick", "--device", "cpu", "--no-progress", "--json", str(out_json), "--plot", str(out_png)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("x tv/sample")  # the table is printed last
    rows = json.loads(out_json.read_text())["rows"]
    methods = {r["method"] for r in rows}
    assert {bench.TORCHVISION_PER_SAMPLE, bench.TORCHVISION_BATCH, bench.GPUAUG, bench.GPUAUG_RAGGED} <= methods
    assert all(r["images_per_s"] > 0 and r["batch"] == 16 for r in rows)
    gpuaug_row = next(r for r in rows if r["method"] == bench.GPUAUG)
    assert gpuaug_row["x_torchvision_per_sample"] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_smallest_run_the_arguments_allow_runs(tmp_path, capsys):
    """--repeats 1 and a batch of 1 are allowed (only 0 and below are refused), and are used as given."""
    out_json = tmp_path / "b.json"
    assert main(["bench", "--device", "cpu", "--batch-sizes", "1", "2", "--repeats", "1", "--no-progress",
                 "--json", str(out_json)]) == 0
    rows = json.loads(out_json.read_text())["rows"]
    assert {r["batch"] for r in rows} == {1, 2} and all(r["images_per_s"] > 0 for r in rows)


def test_ratios_are_over_the_cpu_worker_and_kornia_on_the_same_device():
    """x tv/sample: over torchvision per sample on the CPU at the same batch size, whatever the
    row's device; x kornia: over kornia eager on the row's own device; None where that row is
    missing or failed."""
    rows = [{"device": d, "batch": b, "method": m, "images_per_s": v} for d, b, m, v in [
        ("cpu, 1 thread", 64, bench.TORCHVISION_PER_SAMPLE, 100.0), ("cpu, 1 thread", 64, bench.KORNIA, 50.0),
        ("cpu, 1 thread", 64, bench.GPUAUG, 400.0), ("cuda:0", 64, bench.KORNIA, 2000.0),
        ("cuda:0", 64, bench.GPUAUG, 50000.0), ("cuda:0", 256, bench.GPUAUG, 80000.0),
        ("cpu, 1 thread", 256, bench.TORCHVISION_PER_SAMPLE, 200.0), ("cuda:0", 256, bench.KORNIA, None)]]
    bench._add_ratios(rows)
    ratios = [(r["x_torchvision_per_sample"], r["x_kornia"]) for r in rows]
    assert ratios == [(1.0, 2.0), (0.5, 1.0), (4.0, 8.0), (20.0, 1.0), (500.0, 25.0), (400.0, None), (1.0, None),
                      (None, None)]
    assert all(r["x_kornia_back_to_back"] is None for r in rows)  # no back-to-back figures (CPU rows have none)
    rows[3]["back_to_back_images_per_s"], rows[4]["back_to_back_images_per_s"] = 2500.0, 100000.0
    bench._add_ratios(rows)
    for r in rows:
        r["ms_per_batch"] = r["images_per_s"] and r["batch"] / r["images_per_s"] * 1e3
        r.setdefault("error", "kornia failed")
    assert [r["x_kornia_back_to_back"] for r in rows] == [None, None, None, 1.0, 40.0, None, None, None]
    assert "100000.0" in bench.format_table(rows) and "40.00" in bench.format_table(rows)
    no_b2b = [{**r, "back_to_back_images_per_s": None, "x_kornia_back_to_back": None} for r in rows]
    assert "b2b" in bench.format_table(rows) and "b2b" not in bench.format_table(no_b2b)  # no columns of dashes


def test_every_library_runs_the_same_ops_with_the_same_arguments():
    """The rows compare libraries doing the same work: each op's arguments alike, and every op that
    acts on every sample in torchvision acts on every sample in kornia (its RandomRotation's
    default p is 0.5: it rotated half the batch, and gpuaug 0.42 brightness passed every test)."""
    tv = [t for t in bench.torchvision_transform().transforms if type(t).__name__ != "ToDtype"]
    ours = list(bench.gpuaug_pipeline("cpu").ops)
    assert [type(t).__name__ for t in tv] == [type(t).__name__ for t in ours]
    assert tuple(tv[0].size) == (224, 224)  # the README's RandomResizedCrop(224)
    for a, b in zip(tv, ours):
        for name in ("size", "scale", "ratio", "degrees", "brightness", "contrast", "saturation", "hue", "p", "mean", "std"):
            if hasattr(a, name):
                assert torch.allclose(torch.as_tensor(getattr(a, name), dtype=torch.float64),
                                      torch.as_tensor(getattr(b, name), dtype=torch.float64)), (type(a).__name__, name)
    kornia = bench.kornia_augment("cpu")
    if kornia is None:
        pytest.skip("kornia is not installed")
    k = list(kornia.children())
    assert [type(t).__name__ for t in k] == [type(t).__name__ for t in tv]
    crop, flip, rotation, jitter, normalize = k
    assert [t.p for t in k] == [1.0, 0.5, 1.0, 1.0, 1.0] and [t.p for t in tv[1:2]] == [0.5]
    assert crop._param_generator.output_size == tv[0].size and crop._param_generator.scale == tv[0].scale
    assert crop._param_generator.ratio == tv[0].ratio
    assert rotation._param_generator.degrees.tolist() == list(tv[2].degrees)
    for name in ("brightness", "contrast", "saturation"):  # kornia takes the factor's spread: 1 +- it
        spread = getattr(jitter._param_generator, name)
        assert (1 - spread, 1 + spread) == pytest.approx(getattr(tv[3], name))
    assert (-jitter._param_generator.hue, jitter._param_generator.hue) == pytest.approx(tv[3].hue)
    assert normalize.flags["mean"].tolist() == pytest.approx(tv[4].mean)
    assert normalize.flags["std"].tolist() == pytest.approx(tv[4].std)


def test_cpu_rows_run_on_one_thread_and_the_threads_come_back(monkeypatch):
    """Per worker core, as a DataLoader worker runs (the README's CPU figures say "one thread")."""
    threads = []

    def timed(fn, device, repeats, warmup=1, calls=1):
        threads.append(torch.get_num_threads())
        return 1.0

    monkeypatch.setattr(bench, "median_seconds", timed)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rows = bench.run(["cpu"], [2], repeats=1, progress=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len(threads) == len(rows) >= 4 and set(threads) == {1}
    assert all(r["device"].endswith(", 1 thread)") for r in rows)


@pytest.mark.parametrize("with_kornia", [True, False])
def test_the_progress_bar_ends_full(monkeypatch, with_kornia):
    """The bar's total is the number of rows timed: one more and it stopped short of 100%."""
    from gpuaug import progress

    bars = []

    class Bar:
        def __init__(self, total, **kwargs):
            self.total, self.n, self.closed = total, 0, False
            bars.append(self)

        def update(self):
            self.n += 1

        def set_postfix_str(self, text):
            pass

        def close(self):
            self.closed = True

    monkeypatch.setattr(progress, "progress_bar", Bar)
    monkeypatch.setattr(bench, "median_seconds", lambda *args, **kwargs: 1.0)
    if not with_kornia:
        monkeypatch.setattr(bench, "kornia_augment", lambda device: None)
    rows = bench.run(["cpu"], [1, 2], repeats=1)
    (bar,) = bars
    assert bar.closed and bar.n == bar.total == len(rows)
    assert any(r["method"] == bench.KORNIA for r in rows) == with_kornia


def test_run_has_the_defaults_of_the_command():
    import inspect

    from gpuaug import bench_loader, profile
    from gpuaug.cli import AUGMENT_FLAGS, LOADER_FLAGS, _parser

    def defaults_of(run):
        return {k: p.default for k, p in inspect.signature(run).parameters.items()}

    defaults = defaults_of(bench.run)
    assert list(defaults["batch_sizes"]) == AUGMENT_FLAGS["batch_sizes"] and defaults["repeats"] == AUGMENT_FLAGS["repeats"]
    defaults = defaults_of(bench_loader.run)
    assert (defaults["n_files"], defaults["num_workers"], defaults["step_ms"]) == (
        LOADER_FLAGS["files"], LOADER_FLAGS["num_workers"], LOADER_FLAGS["step_ms"])
    assert defaults["batch_size"] == 32 and defaults["progress"] is True  # as the command passes them
    defaults, args = defaults_of(profile.run), _parser().parse_args(["profile", "d"])
    assert (defaults["max_files"], defaults["step_ms"], defaults["batch_size"], defaults["device"]) == (
        args.max_files, args.step_ms, args.batch_size, args.device)
    assert defaults["progress"] is (not args.no_progress) is True


def test_back_to_back_timing_waits_once_per_repeat(monkeypatch):
    """``calls`` calls timed together, the device waited for once after them: the per-call median."""
    events = []
    monkeypatch.setattr(bench, "_sync", lambda device: events.append("sync"))
    clock = iter(range(0, 1000, 8))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    seconds = bench.median_seconds(lambda: events.append("call"), "cuda", repeats=3, warmup=1, calls=4)
    assert seconds == 2.0  # 8 "seconds" for 4 calls
    assert events == ["call", "sync"] + (["call"] * 4 + ["sync"]) * 3


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU message")
def test_bench_on_a_missing_gpu_says_so(capsys):
    assert main(["bench", "--quick", "--device", "cuda", "--no-progress"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


@pytest.mark.parametrize("args, words", [
    (["bench", "--repeats", "0"], "got --repeats 0"),
    (["bench", "--batch-sizes", "64", "0"], "--batch-sizes 64 0"),
    (["bench", "--loader", "--files", "0"], "--files must be positive"),  # was "must not be negative"
    (["bench", "--loader", "--num-workers", "-1"], "--num-workers -1"),
    (["profile", ".", "--max-files", "0"], "got --max-files 0"),
    (["profile", ".", "--step-ms", "-1"], "--step-ms -1.0"),
])
def test_bench_rejects_bad_arguments_naming_what_came(args, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [(["frobnicate"], "invalid choice: 'frobnicate'"),
                                         ([], "the following arguments are required: command")])
def test_an_unknown_or_missing_command_is_refused(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("args", [["bench", "--quick"], ["bench", "--loader", "--quick"], ["profile", "."]])
def test_unwritable_output_paths_fail_before_the_run(args, tmp_path, monkeypatch, capsys):
    def no_run(*a, **k):
        raise AssertionError("ran before checking its output paths")

    for module in ("gpuaug.bench", "gpuaug.bench_loader", "gpuaug.profile"):
        monkeypatch.setattr(f"{module}.run", no_run)
    for flag, path, words in (("--json", tmp_path / "missing" / "x.json", "does not exist"),
                              ("--json", tmp_path, "is a directory"),
                              ("--json", "", "got an empty one"),
                              ("--plot", "", "got an empty one"),
                              ("--plot", tmp_path / "missing" / "x.png", "does not exist")):
        if flag == "--plot" and args[0] == "profile":
            continue
        if flag == "--plot" and "--loader" in args:
            words = "--plot: not used by --loader, which has no chart"
        with pytest.raises(SystemExit) as e:
            main([*args, flag, str(path)])
        assert e.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_an_existing_output_file_is_written_over(flag, tmp_path, monkeypatch):
    if flag == "--plot":
        pytest.importorskip("matplotlib")
    old = tmp_path / ("old.json" if flag == "--json" else "old.png")
    old.write_text("from an earlier run")
    given = _arguments_given(monkeypatch, "gpuaug.bench", "run", ["bench", "--quick", flag, str(old)])
    assert given["batch_sizes"] == [16]  # the run was reached: the path was taken


def test_a_chart_format_matplotlib_cannot_write_fails_before_the_run(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr("gpuaug.bench.run", lambda *a, **k: pytest.fail("ran before checking --plot"))
    with pytest.raises(SystemExit) as e:
        main(["bench", "--quick", "--plot", str(tmp_path / "chart.txt")])
    assert e.value.code == 2 and "expected a chart file ending in .png" in capsys.readouterr().err


@pytest.mark.parametrize("name, magic", [("chart", b"\x89PNG"), ("chart.svg", b"<?xml")])
def test_the_chart_is_written_at_the_path_given_png_without_a_suffix(tmp_path, name, magic):
    pytest.importorskip("matplotlib")
    rows = [{"device": "cpu (x86_64, 1 thread)", "batch": 16, "method": bench.GPUAUG, "images_per_s": 900.0}]
    bench.save_plot(rows, str(tmp_path / name))
    assert [p.name for p in tmp_path.iterdir()] == [name]  # not chart.png beside it
    assert (tmp_path / name).read_bytes().startswith(magic)


def test_the_chart_groups_each_rows_bars_side_by_side_under_its_label(tmp_path, monkeypatch):
    """Per device and batch, one bar per method, in order, neither overlapping nor straying into
    the next group, with the group's label centred under them."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *args, **kwargs: saved.append(fig))
    methods = [bench.TORCHVISION_PER_SAMPLE, bench.KORNIA, bench.GPUAUG]
    rows = [{"device": d, "batch": b, "method": m, "images_per_s": 100.0 * (i + 1) * b}
            for d in ("cpu (x, 1 thread)", "cuda (H)") for b in (64, 256) for i, m in enumerate(methods)]
    bench.save_plot(rows, str(tmp_path / "chart.png"))
    (ax,) = saved[0].axes
    bars = ax.patches
    assert len(bars) == len(rows)
    ticks = ax.get_xticks()
    for group, tick in enumerate(ticks):
        lefts = sorted(bar.get_x() for bar in bars if abs(bar.get_x() - tick) < 0.5)
        assert len(lefts) == len(methods)
        width = bars[0].get_width()
        assert all(b - a >= width - 1e-9 for a, b in zip(lefts, lefts[1:]))  # side by side
        assert lefts[0] == pytest.approx(tick - len(methods) * width / 2)  # centred on the tick
        assert tick - 0.5 < lefts[0] and lefts[-1] + width < tick + 0.5  # a gap before the next group
        assert tick == pytest.approx(ticks[0] + group)
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "cpu\nbatch 64"
    # the bars keep the order of the rows' methods (legend) and each its group's value
    assert [text.get_text() for text in ax.get_legend().get_texts()] == methods


def test_sample_images_are_ragged_real_photos():
    photos = ga.sample_images()
    assert len(photos) == 6 and len({tuple(p.shape) for p in photos}) > 3
    assert all(p.dtype.is_floating_point is False and p.shape[0] == 3 for p in photos)
    assert [tuple(p.shape) for p in ga.sample_images(8)][6:] == [tuple(p.shape) for p in photos[:2]]
    assert ga.sample_images(0) == []
    with pytest.raises(ValueError, match="n should be >= 0, got -1"):
        ga.sample_images(-1)


def test_keep_freed_memory_changes_no_result(photos):
    pipe = ga.Pipeline(ga.RandomResizedCrop(64), ga.ColorJitter(0.4, 0.4, 0.4, 0.1), device="cpu", seed=0)
    before = pipe(photos)
    assert isinstance(ga.keep_freed_memory(), bool)
    pipe.manual_seed(0)
    assert (pipe(photos) == before).all()


_MALLOC_PROBE = """
import ctypes, sys, torch, gpuaug as ga
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = ga.keep_freed_memory() if sys.argv[1] == "call" else None
before = libc.mallinfo2()
x = torch.empty(64 << 20, dtype=torch.uint8).fill_(1)
during = libc.mallinfo2()
del x
after = libc.mallinfo2()
print(applied, during.hblkhd - before.hblkhd, during.arena - before.arena, during.arena - after.arena)
"""


def _glibc_version() -> tuple[int, ...]:
    name, version = platform.libc_ver()
    return tuple(int(p) for p in version.split(".")[:2]) if name == "glibc" and version else ()


@pytest.mark.skipif(not sys.platform.startswith("linux") or _glibc_version() < (2, 33),
                    reason="glibc's mallopt and mallinfo2 (glibc 2.33 and later)")
def test_keep_freed_memory_serves_big_blocks_from_the_heap_and_keeps_them():
    """What its docstring says, seen through glibc's own counts, in fresh processes: a 64 MiB
    tensor comes from the heap rather than its own mmap, and the heap is not trimmed when it is
    freed. Without the call the same tensor is mmapped (so the probe can tell the two apart)."""
    def probe(arg):
        out = subprocess.run([sys.executable, "-c", _MALLOC_PROBE, arg], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        applied, mapped, heap_grew, heap_shrank = out.stdout.split()
        return applied, int(mapped), int(heap_grew), int(heap_shrank)

    mib = 1 << 20
    applied, mapped, heap_grew, heap_shrank = probe("call")
    assert applied == "True"
    assert mapped < 64 * mib and heap_grew >= 32 * mib and heap_shrank == 0  # some of it may be free heap already
    assert probe("no-call")[1] >= 64 * mib


def test_without_triton_sets_the_switch_for_the_call_only(monkeypatch):
    seen = []
    monkeypatch.delenv("GPUAUG_TRITON", raising=False)
    bench._without_triton(lambda x: seen.append(os.environ.get("GPUAUG_TRITON")), None)
    assert seen == ["0"] and "GPUAUG_TRITON" not in os.environ


def test_a_failing_peer_loses_its_row_not_the_run(monkeypatch, tmp_path):
    def broken_kornia(device):
        def call(x):
            raise RuntimeError("compiled kornia broke\nsecond line")
        return call

    monkeypatch.setattr(bench, "kornia_augment", broken_kornia)
    with pytest.warns(RuntimeWarning, match="kornia AugmentationSequential failed"):
        rows = bench.run(["cpu"], [4], repeats=1, progress=False)
    failed = [r for r in rows if r["method"] == bench.KORNIA]
    assert len(failed) == 1 and failed[0]["images_per_s"] is None
    assert failed[0]["error"] == "RuntimeError: compiled kornia broke"
    assert all(r["images_per_s"] > 0 and r["x_kornia"] is None for r in rows if r is not failed[0])
    table = bench.format_table(rows)
    assert "failed: RuntimeError: compiled kornia broke" in table and "gpuaug, ragged list input" in table
    bench.save_json(rows, tmp_path / "rows.json")
    if importlib.util.find_spec("matplotlib"):
        bench.save_plot(rows, tmp_path / "rows.png")

    def broken_gpuaug(device):
        def call(x):
            raise RuntimeError("our own bug")
        return call

    monkeypatch.setattr(bench, "gpuaug_pipeline", broken_gpuaug)
    monkeypatch.setattr(bench, "kornia_augment", lambda device: None)
    with pytest.raises(RuntimeError, match="our own bug"):  # gpuaug's own rows never fail quietly
        bench.run(["cpu"], [4], repeats=1, progress=False)


def test_a_run_cut_short_leaves_its_rows(tmp_path, monkeypatch, capsys):
    """On a lent GPU the check runs under a time limit: rows measured before a cut are kept."""
    calls = []

    def timed(fn, device, repeats, warmup=1):
        calls.append(fn)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as `timeout` would stop it
        return 0.01

    monkeypatch.setattr(bench, "median_seconds", timed)
    path = tmp_path / "partial.json"
    with pytest.raises(KeyboardInterrupt):
        main(["bench", "--quick", "--device", "cpu", "--no-progress", "--json", str(path)])
    rows = json.loads(path.read_text())["rows"]
    assert [r["images_per_s"] for r in rows] == [1600.0, 1600.0]
    assert capsys.readouterr().err.count("gpuaug bench: cpu") == 2


class _Called(Exception):
    """Raised by a stand-in for a command's run, carrying the arguments it was given."""


def _arguments_given(monkeypatch, module: str, name: str, argv: list[str]) -> dict:
    """What ``gpuaug ARGV`` passes to ``module.name`` (its run), by signature name, the run not done."""
    import importlib
    import inspect

    target = importlib.import_module(module)
    signature = inspect.signature(getattr(target, name))

    def record(*args, **kwargs):
        raise _Called(signature.bind(*args, **kwargs).arguments)

    monkeypatch.setattr(target, name, record)
    with pytest.raises(_Called) as called:
        main(argv)
    return called.value.args[0]


@pytest.mark.parametrize("argv, expected", [
    (["bench"], dict(devices=None, batch_sizes=[64, 256], repeats=5, progress=True)),  # README: batch 64 and 256
    (["bench", "--quick", "--no-progress", "--device", "cpu"], dict(devices=["cpu"], batch_sizes=[16], repeats=5,
                                                                     progress=False)),
    (["bench", "--batch-sizes", "8", "--repeats", "2"], dict(batch_sizes=[8], repeats=2)),
])
def test_bench_gives_its_run_the_defaults_its_help_states(argv, expected, monkeypatch):
    given = _arguments_given(monkeypatch, "gpuaug.bench", "run", argv)
    assert {k: given[k] for k in expected} == expected


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--loader"], dict(root=None, n_files=192, num_workers=2, batch_size=32, step_ms=20.0, device=None,
                                 progress=True)),
    (["bench", "--loader", "--quick", "--no-progress", "--num-workers", "0", "--step-ms", "1"],
     dict(n_files=48, num_workers=0, batch_size=16, step_ms=1.0, progress=False)),
    (["bench", "--loader", "--files", "1", "--device", "cpu"], dict(n_files=1, device="cpu")),  # 1 file is allowed
    (["bench", "--loader", "--step-ms", "0"], dict(step_ms=0.0)),  # no training step: the loader alone
])
def test_bench_loader_gives_its_run_the_defaults_its_help_states(argv, expected, monkeypatch):
    given = _arguments_given(monkeypatch, "gpuaug.bench_loader", "run", argv)
    assert {k: given[k] for k in expected} == expected


@pytest.mark.parametrize("argv, expected", [
    (["profile", "d"], dict(directory="d", max_files=256, step_ms=20.0, device=None, batch_size=32, progress=True)),
    (["profile", "d", "--no-progress", "--batch-size", "4"], dict(batch_size=4, progress=False)),
    (["profile", "d", "--max-files", "1", "--batch-size", "1", "--step-ms", "0"],  # the smallest allowed
     dict(max_files=1, batch_size=1, step_ms=0.0)),
    (["pack", "s", "d"], dict(src="s", dst="d", progress=True, on_error="raise", force=False)),
    (["pack", "s", "d", "--no-progress", "--force", "--on-error", "skip"], dict(progress=False, on_error="skip",
                                                                                force=True)),
])
def test_profile_and_pack_give_their_runs_what_was_asked(argv, expected, monkeypatch):
    module, name = ("gpuaug.profile", "run") if argv[0] == "profile" else ("gpuaug.data.clips", "pack_folder")
    given = _arguments_given(monkeypatch, module, name, argv)
    assert {k: given[k] for k in expected} == expected


@pytest.mark.parametrize("argv, words", [
    (["bench", "--num-workers", "4"], "--num-workers: used only with --loader"),
    (["bench", "--step-ms", "5", "--files", "10"], "--step-ms --files: used only with --loader"),
    (["bench", "--loader", "--batch-sizes", "8"], "--batch-sizes: not used by --loader"),
    (["bench", "--loader", "--repeats", "3"], "--repeats: not used by --loader"),
    (["bench", "--loader", "--device", "cpu", "--device", "cuda"], "--loader runs gpuaug on one device, got "
                                                                    "--device cpu --device cuda"),
    (["bench", "--quick", "--batch-sizes", "256"], "--batch-sizes: --quick sets its own sizes"),
    (["bench", "--quick", "--repeats", "9"], "--repeats: --quick sets its own sizes"),
    (["bench", "--loader", "--quick", "--files", "500"], "--files: --quick sets its own sizes"),
])
def test_bench_refuses_a_flag_its_run_would_not_use(argv, words, monkeypatch, capsys):
    """Each of these was silently ignored: `--quick --batch-sizes 256` timed batch 16, `--loader
    --batch-sizes 8` batch 32, `--num-workers 4` without `--loader` nothing, `--loader` the first
    device only."""
    for module in ("gpuaug.bench", "gpuaug.bench_loader"):
        monkeypatch.setattr(f"{module}.run", lambda *a, **k: pytest.fail("ran with a flag it does not use"))
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err
