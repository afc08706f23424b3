"""`gpuaug profile` and `gpuaug bench --loader` on small generated folders."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import gpuaug.profile
from gpuaug import DecodeError
from gpuaug.bench_loader import make_jpeg_folder
from gpuaug.cli import main


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory):
    return make_jpeg_folder(tmp_path_factory.mktemp("jpegs"), n=24)


def test_profile_prints_bottleneck_and_writes_json(jpeg_folder, tmp_path, capsys, monkeypatch):
    (jpeg_folder / "class0" / "broken.jpg").write_bytes(b"not a jpeg")
    out = tmp_path / "profile.json"
    unreadable, read_bytes = sorted((jpeg_folder / "class1").iterdir())[0], gpuaug.profile.read_bytes

    def read_failing_once(path):  # a file the OS refuses (root reads everything: stand-in)
        if str(path) == str(unreadable):
            raise DecodeError(str(path), "cannot read ([Errno 13] Permission denied)")
        return read_bytes(path)

    monkeypatch.setattr(gpuaug.profile, "read_bytes", read_failing_once)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the bad file is reported, not warned once per setting
        assert main(["profile", str(jpeg_folder), "--no-progress", "--step-ms", "1", "--batch-size", "8",
                     "--device", "cpu", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    broken = str(jpeg_folder / "class0" / "broken.jpg")
    assert "(1 undecodable, skipped)" in text and text.count(broken) == 1 and "(1 unreadable)" in text
    assert "files skipped, unreadable or undecodable (2):" in text and f"{unreadable}: cannot read" in text
    assert "the loader is bound by:" in text and "use: DataLoader(num_workers=" in text
    report = json.loads(out.read_text())
    assert report["files"] == 25 and report["bottleneck"] in ("disk", "decode", "augment")
    assert len(report["stages"]["decode"]["undecodable"]) == 1 and broken in report["stages"]["decode"]["undecodable"][0]
    assert {"read", "decode", "torchvision_transforms", "gpuaug"} == set(report["stages"])
    assert report["stages"]["read"]["files_per_s"] > 0 and report["sweep"]
    assert {r["num_workers"] for r in report["sweep"]} >= {0, 1}
    assert all(r["images_per_s"] > 0 for r in report["sweep"])
    # each setting: its warm-up (one batch a worker) timed apart, then 16+ batches, files taken again
    assert all(r["warmup_batches"] == max(r["num_workers"], 1) and r["warmup_s"] > 0
               and r["batches"] - r["warmup_batches"] >= 16 for r in report["sweep"])
    bounds = report["bounds_images_per_s"]  # the bound named is the slowest stage, the setting advised the fastest
    assert bounds[report["bottleneck"]] == min(bounds.values())
    assert report["best"]["images_per_s"] == max(r["images_per_s"] for r in report["sweep"])
    assert f"the loader is bound by: {report['bottleneck']}" in text
    table = text[text.index("num_workers pin_memory"):].splitlines()[1 : 1 + len(report["sweep"])]
    for line, row in zip(table, report["sweep"]):  # the printed table says what the JSON says
        workers, pin, prefetch, images_per_s, wait = line.split()[:5]
        assert (int(workers), pin, prefetch) == (row["num_workers"], str(row["pin_memory"]), str(row["prefetch_factor"]))
        assert float(images_per_s) == pytest.approx(row["images_per_s"], abs=0.051)
        assert float(wait.rstrip("%")) == pytest.approx(100 * row["data_wait_fraction"], abs=0.051)


def test_profile_sweeps_each_loader_setting_once():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert gpuaug.profile.loader_settings(6, cpu) == [(0, False, None), (1, False, 2), (1, False, 4), (2, False, 2),
                                                      (2, False, 4), (4, False, 2), (4, False, 4), (6, False, 2),
                                                      (6, False, 4)]
    assert gpuaug.profile.loader_settings(1, cuda) == [(0, False, None), (0, True, None), (1, False, 2), (1, False, 4),
                                                       (1, True, 2), (1, True, 4)]

    many = gpuaug.profile.loader_settings(64, cpu)
    assert [w for w, _, prefetch in many if prefetch != 4] == [0, 1, 2, 4, 8, 16, 32, 64]  # powers of two to 32, then cores
    assert [w for w, _, prefetch in gpuaug.profile.loader_settings(40, cpu) if prefetch != 4][-2:] == [32, 40]


def test_profile_times_a_stage_on_one_thread_and_gives_its_seconds(monkeypatch):
    clock = [10.0]
    monkeypatch.setattr(gpuaug.profile.time, "perf_counter", lambda: clock[0])
    before = torch.get_num_threads()

    def stage():
        clock[0] += 2.5
        return torch.get_num_threads()

    assert gpuaug.profile._one_thread(stage) == (1, 2.5)
    assert torch.get_num_threads() == before


def test_profile_rates_are_what_each_stage_did_over_its_time(tmp_path, monkeypatch):
    """Each stage timed at 2 s (a stand-in clock): its rate is its count over 2 s."""
    monkeypatch.setattr(gpuaug.profile, "_one_thread", lambda fn: (fn(), 2.0))
    folder = make_jpeg_folder(tmp_path, n=8)
    paths = gpuaug.profile.find_images(folder, 8)
    assert len(paths) == 8
    report = gpuaug.profile.run(folder, max_files=8, step_ms=0, device="cpu", batch_size=4, max_workers=0,
                                progress=False)
    stages = report["stages"]
    assert stages["read"]["files_per_s"] == 4.0 and stages["read"]["unreadable"] == 0
    assert stages["read"]["MB_per_s"] == pytest.approx(sum(os.path.getsize(p) for p in paths) / 2 / 1e6)
    assert stages["decode"]["images_per_s_per_core"] == stages["torchvision_transforms"]["images_per_s_per_core"] == 4.0
    assert [(r["num_workers"], r["prefetch_factor"]) for r in report["sweep"]] == [(0, None)]
    bounds = report["bounds_images_per_s"]
    assert bounds["disk"] == 4.0 and bounds["decode"] == 4.0  # no workers: the main process decodes
    assert report["bottleneck"] == min(bounds, key=bounds.__getitem__)
    # Three cores on the CPU: two decode while one augments (the sweep cut to one setting).
    monkeypatch.setattr(gpuaug.profile, "loader_settings", lambda cores, device: [(0, False, None)])
    three = gpuaug.profile.run(folder, max_files=8, step_ms=0, device="cpu", batch_size=4, max_workers=3,
                               progress=False)
    assert three["cores"] == 3 and three["bounds_images_per_s"]["decode"] == 8.0


def test_simulated_loop_times_the_steady_state_after_its_warm_up(monkeypatch):
    """The workers' start (a long first wait) is timed apart, not spread over a short run's batches:
    `gpuaug profile` advised num_workers=0 on 8-batch runs because of it."""
    import gpuaug.bench_loader as bench_loader

    clock = [0.0]
    monkeypatch.setattr(bench_loader.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(bench_loader.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))

    def batches(waits):
        for wait in waits:
            clock[0] += wait
            yield torch.zeros(4, 1), torch.zeros(4)

    waits = [0.5, 0.01, 0.0, 0.03, 0.0]  # seconds each batch keeps the loop waiting
    timing = bench_loader.simulated_loop(batches(waits), step_ms=20, warmup=2)
    assert timing.images == 12 and timing.warmup_seconds == pytest.approx(0.5 + 0.01 + 2 * 0.02)
    assert timing.waited == pytest.approx(0.03) and timing.seconds == pytest.approx(0.03 + 3 * 0.02)
    whole = bench_loader.simulated_loop(batches(waits), step_ms=20)  # no warm-up: all of it
    assert whole.images == 20 and whole.warmup_seconds == 0
    assert whole.waited == pytest.approx(0.54) and whole.seconds == pytest.approx(0.54 + 5 * 0.02)
    short = bench_loader.simulated_loop(batches(waits[:2]), step_ms=20, warmup=2)  # too short to skip any
    assert short.images == 8 and short.waited == pytest.approx(0.51)
    # What the loop is given: one batch a worker to warm up, then 16 or twice the workers, files again as needed
    order, warmup = bench_loader.steady_order(5, 2, 10)
    assert warmup == 10 and len(order) == (10 + 20) * 2 and order[:7] == [0, 1, 2, 3, 4, 0, 1]
    assert bench_loader.steady_order(5, 2, 0) == ([i % 5 for i in range(34)], 1)
    with pytest.raises(ValueError, match="expected n_items and batch_size >= 1 and num_workers >= 0, got 0, 2, 1"):
        bench_loader.steady_order(0, 2, 1)


def test_steady_order_refuses_each_bad_argument_alone():
    import gpuaug.bench_loader as bench_loader

    for args in [(0, 2, 1), (5, 0, 1), (5, 2, -1)]:  # one bad argument each (an `and` of the three passed)
        with pytest.raises(ValueError, match="expected n_items and batch_size >= 1 and num_workers >= 0"):
            bench_loader.steady_order(*args)


def test_the_loader_benchmarks_jpegs_are_the_sample_photos_fitted_to_each_size(tmp_path):
    """``gpuaug bench --loader``'s folder: each sample photo scaled to cover one of the mixed sizes and
    cropped at its centre, as PIL's ``ImageOps.fit`` does, never padded (a resize one pixel short
    left a black row in every image, and nothing said so)."""
    import numpy as np
    from PIL import Image, ImageOps

    from gpuaug.bench_loader import SIZES
    from gpuaug.data.decode import load_rgb

    photos = gpuaug.sample_images()
    files = sorted(make_jpeg_folder(tmp_path, n=12).glob("class*/*.jpg"), key=lambda p: p.name)
    assert [p.parent.name for p in files] == ["class0", "class1"] * 6
    for i, path in enumerate(files):
        ours = load_rgb(str(path)).float()
        h, w = ours.shape[1:]
        assert (h, w) in SIZES
        photo = Image.fromarray(photos[i % len(photos)].permute(1, 2, 0).numpy())
        fitted = torch.from_numpy(np.array(ImageOps.fit(photo, (w, h), Image.BILINEAR))).permute(2, 0, 1).float()
        diff = (ours - fitted).abs()  # JPEG quality 90 and a different resampling: a few levels
        assert diff.mean() < 8, (path.name, diff.mean())
        worst_row, worst_column = diff.mean(dim=(0, 2)).max(), diff.mean(dim=(0, 1)).max()
        assert max(worst_row, worst_column) < 25, (path.name, worst_row, worst_column)  # no padded edge


def test_version_names_gpuaug_and_what_it_runs_with(capsys):
    """``gpuaug --version`` (for a bug report): the installed distribution's version, which
    ``gpuaug.__version__`` must repeat, and torch's, torchvision's and the GPUs."""
    from importlib.metadata import version

    import torchvision

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and out.startswith(f"gpuaug {version('gpuaug')} (Python ")
    assert gpuaug.__version__ == version("gpuaug")
    assert f"torch {torch.__version__}, torchvision {torchvision.__version__}" in out
    assert ("no CUDA device" in out) != torch.cuda.is_available()


def test_profile_on_a_folder_without_images(tmp_path, capsys):
    assert main(["profile", str(tmp_path), "--no-progress"]) == 2
    assert "no image files" in capsys.readouterr().err


def test_profile_on_a_folder_of_undecodable_images_names_one(tmp_path, capsys):
    (tmp_path / "a.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "b.png").write_bytes(b"")
    assert main(["profile", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "none of the 2 files" in err and "the first error: " + str(tmp_path / "b.png") + ": empty file" in err


def test_loader_bench_rates_are_the_loops_images_and_wait_over_its_time(monkeypatch):
    """Each loop timed by a stand-in at 2 s, 0.5 s of it waiting for data, 64 images."""
    monkeypatch.setattr(gpuaug.bench_loader, "simulated_loop",
                        lambda batches, step_ms, warmup: gpuaug.bench_loader.LoopTiming(2.0, 0.5, 64, 0.1))
    rows = gpuaug.bench_loader.run(n_files=8, num_workers=0, batch_size=4, step_ms=0, device="cpu", progress=False)
    assert [(r["loop_images_per_s"], r["data_wait_fraction"]) for r in rows] == [(32.0, 0.25)] * 2


def test_loader_bench_quick(tmp_path, capsys):
    out = tmp_path / "loader.json"
    assert main(["bench", "--loader", "--quick", "--no-progress", "--device", "cpu", "--step-ms", "1",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2 and rows[0]["x_worker_capacity"] == 1.0
    assert all(r["warmup_batches"] == max(r["num_workers"], 1) and r["measured_batches"] >= 16 for r in rows)
    assert rows[1]["worker_images_per_s"] > rows[0]["worker_images_per_s"]  # decoding alone is cheaper
    assert "worker img/s" in capsys.readouterr().out


def _script(name: str):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_pipeline_script_on_the_cpu(capsys):
    _script("profile_pipeline").main(["--device", "cpu", "--batch", "4", "--calls", "1", "--rows", "5"])
    text = capsys.readouterr().out
    assert "profile_pipeline: cpu batch 4" in text and "img/s" in text and "aten::" in text


def test_handoff_bench_script_on_the_cpu(capsys):
    _script("handoff_bench").main(["--batch", "4", "--rounds", "1", "--wait", "0.5"])
    text = capsys.readouterr().out
    for row in ("uint8 images: list", "uint8 images: PackedImages (ga.data.collate)", "JPEG bytes, decode='gpu': list",
                "JPEG bytes, decode='gpu': EncodedBatch (ga.data.collate)", "list / one buffer: receive"):
        assert row in text


def test_count_ops_script_counts_every_layout(capsys):
    _script("count_ops").main(["--batch", "8", "--calls", "1"])
    text = capsys.readouterr().out
    for label in ("torch kernels:", "Triton kernels:", "Triton kernels, ragged list:", "Triton kernels, ragged PackedImages:",
                  "Triton kernels, ragged PackedImages, Resize(12) + CenterCrop(8) + Normalize:"):
        assert label in text


def test_kernel_instructions_script_counts_each_kernel(capsys):
    """Compiles for sm_90 and disassembles with the nvdisasm Triton ships: no GPU needed."""
    pytest.importorskip("triton")
    _script("kernel_instructions").main([])
    lines = capsys.readouterr().out.splitlines()
    per_pixel = {line.split(":")[0].strip(): int(line.split(" -> ")[1].split()[0]) for line in lines
                 if line.strip().startswith(("resampling,", "warp"))}
    assert len(per_pixel) == 5 and all(10 < v < 1000 for v in per_pixel.values()), lines  # 2 orders x 2 passes, warp
    plane = lines[-1].split("M instructions: ")[1]
    assert "rows first" in plane and "columns first" in plane, lines


def test_tune_kernels_script_runs_through_the_interpreter():
    """Times the resampling per tile setting on a GPU; here (Triton's interpreter, its own process:
    TRITON_INTERPRET is read when Triton loads) only that it runs and reports every kernel."""
    pytest.importorskip("triton")
    script = Path(__file__).parents[1] / "benchmarks" / "tune_kernels.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--batch", "2", "--size", "24", "32",
                           "--crop", "8", "--repeats", "1", "--quick"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout
    for kernel in ("resample_axes (RESAMPLE_FIRST_AXIS", "warp_affine (GEOMETRY_BLOCK"):
        section = text.split(kernel)[1].split("fastest over both inputs")[0]
        assert len([line for line in section.splitlines() if line.startswith("  (")]) == 2, text  # --quick: 2 settings
        assert "default" in section and "fastest" in section, text
    for label in ("one size", "ragged PackedImages"):
        assert f"color_program, {label}, as it is:" in text, text
    calls = text.split("the pipeline call, img/s")[1]
    assert "  default: one size" in calls and "  fastest settings: one size" in calls, text
    without = subprocess.run([sys.executable, str(script), "--device", "cpu"], capture_output=True, text=True,
                             timeout=120, env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert without.returncode != 0 and "TRITON_INTERPRET=1" in without.stderr


def test_taps_bench_script_runs_both_settings_through_the_interpreter():
    """On a GPU it times ragged batches with large photos through the resampling before and after
    its per-sample tap loop; here (Triton's interpreter) only that both settings run, each in its
    own process, and report the tap counts past the unrolled ones that their batches needed."""
    pytest.importorskip("triton")
    script = Path(__file__).parents[1] / "benchmarks" / "taps_bench.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--batch", "2", "--batches", "1",
                           "--min-side", "90", "--max-side", "100", "--photo-side", "30", "--crop", "8",
                           "--repeats", "1"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert [line.split(":")[0].strip() for line in lines] == ["now (8 unrolled + loop)", "before (every tap unrolled)"]
    for line in lines:  # 90-100 px to 8: 24-27 taps along an axis, past the 8 unrolled
        taps = line.split("taps (rows, columns) ")[1].split(";")[0]
        assert max(int(t) for t in taps.strip("()").split(", ")) > 20 and "img/s" in line, done.stdout


def test_ragged_cpu_bench_times_both_chunkings_and_checks_they_agree():
    """It times a ragged batch with a large image on the CPU chunked by size (now) and in order
    with the batch's taps (before); here, at tiny sizes, that both run and give the same output
    (the script asserts it) and it prints a row for each and for the subsets alone."""
    script = Path(__file__).parents[1] / "benchmarks" / "ragged_cpu_bench.py"
    done = subprocess.run([sys.executable, str(script), "--batch", "6", "--large", "1", "--large-side", "400",
                           "--photo-side", "60", "--crop", "16", "--repeats", "1", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert rows == ["now (chunks of like sizes, their own taps)", "before (chunks in order, the batch's taps)",
                    "the 5 photos alone", "the 1 large alone"], done.stdout


def test_cpu_cores_bench_times_threads_and_workers():
    """It times the pipeline in this process at each thread count and in each number of DataLoader
    workers; here, at tiny sizes, that every setting runs and prints its row."""
    script = Path(__file__).parents[1] / "benchmarks" / "cpu_cores_bench.py"
    done = subprocess.run([sys.executable, str(script), "--batch", "4", "--rounds", "1", "--repeats", "1",
                           "--batches", "2", "--size", "16", "--photo-side", "40"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert rows == ["1 thread(s), ragged list", "1 thread(s), stacked batch", "2 thread(s), ragged list",
                    "2 thread(s), stacked batch", "1 worker(s)", "2 worker(s)"], done.stdout


def test_warp_cache_lines_model(capsys):
    """Unrotated, the model is plain arithmetic: a tap of 32 pixels of a row reads 64 bytes, in
    one 128-byte line or, shifted by a pixel, sometimes two; a 4x8 group's tap reads 4 rows."""
    _script("warp_cache_lines").main(["--max-degrees", "15"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and "groups of 1x32: at 0 degrees 1.25" in lines[1] and "4x8: at 0 degrees 4.25" in lines[3]


def test_cifar_bench_script_on_the_cpu(capsys):
    rows = _script("cifar_bench").main(["--batch", "8", "--repeats", "3"])
    text = capsys.readouterr().out
    assert "cifar_bench: cpu, batch 8" in text
    names = {(mode, name) for mode, name, _ in rows}
    for mode in ("constant", "reflect"):
        assert (mode, "gpuaug") in names and (mode, "torchvision v2 per sample") in names
    assert all(rate > 0 for _, name, rate in rows if not name.startswith("kornia eager (failed"))


def test_every_file_the_package_needs_besides_python_is_in_package_data():
    """A data file under gpuaug/ that pyproject's package-data does not list is left out of the
    wheel: the sample images (gpuaug bench), the native C sources, py.typed (type checkers read
    gpuaug's annotations only with it)."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gpuaug"]
    files = [p.relative_to(root / "gpuaug").as_posix() for p in (root / "gpuaug").rglob("*")
             if p.is_file() and p.suffix not in (".py", ".pyc", ".so") and "__pycache__" not in p.parts]
    assert "py.typed" in files and any(f.startswith("sample_images/") for f in files)
    missing = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not missing, f"not in pyproject's package-data: {missing}"


def test_public_annotations_resolve_at_runtime():
    """``typing.get_type_hints`` on every public class's constructor and function: tools that build
    configs or CLIs from signatures (jsonargparse, LightningCLI) call it. Names imported only for
    type checkers (``InterpolationMode``, ``Pipeline`` in DeviceLoader's) were a NameError there."""
    import inspect
    import typing

    import gpuaug
    import gpuaug.data

    checked = 0
    for module in (gpuaug, gpuaug.data):
        for name in dir(module):
            obj = getattr(module, name)
            if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not getattr(obj, "__module__", "").startswith("gpuaug"):
                continue
            typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
            checked += 1
    assert checked >= 20
