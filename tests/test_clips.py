"""Video clips: frame folders, packed clips (round trip, corruption), and one draw per clip."""

import multiprocessing
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import gpuaug as ga
from conftest import WORKER_TIMEOUT_S
from gpuaug.cli import main
from gpuaug.data import BadFile, FrameFolder, PackedClips, collate, frame_indices


@pytest.fixture(scope="module")
def frames_root(tmp_path_factory, photos):
    """root/<class>/<video>/frame_XXXX.jpg: each video is a slow pan across a real photo."""
    root = tmp_path_factory.mktemp("frames")
    for c, (photo, n) in enumerate([(photos[0], 12), (photos[1], 5), (photos[2], 9)]):
        video = root / f"class{c % 2}" / f"video{c}"
        video.mkdir(parents=True)
        arr = photo.permute(1, 2, 0).numpy()
        for t in range(n):
            Image.fromarray(np.ascontiguousarray(arr[t * 4 : t * 4 + 160, t * 6 : t * 6 + 200])).save(
                video / f"frame_{t:04d}.jpg", quality=90)
    return root


def test_frame_indices_spread_evenly():
    assert frame_indices(12, 4) == [0, 4, 7, 11]
    assert frame_indices(3, 5) == [0, 0, 1, 2, 2]  # a short video repeats frames
    assert frame_indices(7, 1) == [3]
    with pytest.raises(ValueError):
        frame_indices(0, 4)
    for frames in (0, -2, 2.5, True):  # 0 gave [], as if a clip could have no frames
        with pytest.raises(ValueError, match="frames should be an int >= 1"):
            frame_indices(12, frames)


def test_frame_folder_clips(frames_root):
    ds = FrameFolder(frames_root, frames=4)
    assert ds.classes == ["class0", "class1"] and len(ds) == 3
    clip, label = ds[0]
    assert clip.shape == (4, 3, 160, 200) and clip.dtype == torch.uint8 and label == 0
    assert not torch.equal(clip[0], clip[-1])


def test_frame_folders_that_hold_no_clip_say_what_is_missing(tmp_path, photos):
    from gpuaug.data import ImageFolder, pack_frames

    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no videos found under .*empty.*root/<class>/<video>"):
        FrameFolder(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no class folders found"):
        ImageFolder(tmp_path / "empty")
    (tmp_path / "empty" / "cats").mkdir()
    with pytest.raises(FileNotFoundError, match="no image files with extensions"):
        ImageFolder(tmp_path / "empty")
    root = tmp_path / "clips"
    (root / "a" / "silent").mkdir(parents=True)
    (root / "a" / "silent" / "notes.txt").write_text("no frames here")
    mixed = root / "a" / "mixed"
    mixed.mkdir()
    for t, (h, w) in enumerate([(40, 50), (40, 50), (30, 50)]):
        Image.fromarray(np.ascontiguousarray(photos[0][:, :h, :w].permute(1, 2, 0).numpy())).save(mixed / f"{t}.jpg")
    for frames in (0, -1, 2.0, "8", True, None):
        with pytest.raises(ValueError, match="frames should be an int >= 1"):
            FrameFolder(root, frames=frames)
    ds = FrameFolder(root, frames=3)
    bad = {ds.videos[i][0].rsplit("/", 1)[1]: ds[i][0] for i in range(len(ds))}
    assert isinstance(bad["silent"], BadFile) and "no JPEG frames" in bad["silent"].cause
    assert isinstance(bad["mixed"], BadFile) and "frames of different sizes" in bad["mixed"].cause
    assert bad["mixed"].path.endswith("mixed")
    with pytest.raises(ValueError, match="no frames to pack"):
        pack_frames([], tmp_path / "x.pack")
    assert not (tmp_path / "x.pack").exists()
    with pytest.raises(TypeError, match="a list of frame files, got one str"):  # was "/: cannot read (Is a directory)"
        pack_frames(str(next(root.rglob("*.jpg"))), tmp_path / "x.pack")


@pytest.mark.parametrize("pattern", ["{t}.jpg", "img{t}.jpeg", "frame_{t:03d}.jpg"])
def test_frames_are_read_in_time_order_with_unpadded_numbers(tmp_path, pattern):
    """ffmpeg's ``%d.jpg`` names (1.jpg ... 12.jpg) sorted as text put 10-12 before 2: the clip's
    frames would be shuffled in time. Frame t is a flat gray of level 20 * t here."""
    video = tmp_path / "class" / "video"
    video.mkdir(parents=True)
    for t in range(1, 13):
        Image.fromarray(np.full((16, 16, 3), 20 * t, np.uint8)).save(video / pattern.format(t=t), quality=95)
    ds = FrameFolder(tmp_path, frames=12)
    clip, _ = ds[0]
    levels = clip.float().mean((1, 2, 3)).round().tolist()
    assert levels == [20.0 * t for t in range(1, 13)], levels
    assert main(["pack", str(tmp_path), str(tmp_path / "packed"), "--no-progress"]) == 0
    assert torch.equal(PackedClips(tmp_path / "packed", frames=12)[0][0], clip)


def test_packed_clips_round_trip_equal_frame_folders(frames_root, tmp_path):
    assert main(["pack", str(frames_root), str(tmp_path / "packed"), "--no-progress"]) == 0
    folder, packed = FrameFolder(frames_root, frames=5), PackedClips(tmp_path / "packed", frames=5)
    assert packed.classes == folder.classes and len(packed) == len(folder)
    for i in range(len(folder)):
        (a, ya), (b, yb) = folder[i], packed[i]
        assert ya == yb and torch.equal(a, b)


@pytest.mark.parametrize("damage", ["truncate", "garble_magic", "garble_index", "unordered_index", "garble_count",
                                    "zero_count", "empty"])
def test_corrupt_pack_files_name_their_path(frames_root, tmp_path, damage):
    main(["pack", str(frames_root), str(tmp_path / "packed"), "--no-progress"])
    target = sorted((tmp_path / "packed").rglob("*.pack"))[0]
    data = bytearray(target.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "garble_magic":
        data[:8] = b"NOTAPACK"
    elif damage == "garble_index":
        data[16:24] = (10**9).to_bytes(8, "little")
    elif damage == "unordered_index":  # two frames' offsets swapped: the index still ends at the file's end
        data[24:32], data[32:40] = data[32:40], data[24:32]
    elif damage == "garble_count":  # 2**32 - 1 frames: a 32 GiB index must not be read (MemoryError)
        data[12:16] = (2**32 - 1).to_bytes(4, "little")
    elif damage == "zero_count":  # no frame to choose from
        data[12:16] = bytes(4)
    else:
        data = b""
    target.write_bytes(bytes(data))
    ds = PackedClips(tmp_path / "packed", frames=3)
    index = [p for p, _ in ds.videos].index(str(target))
    item, _ = ds[index]
    assert isinstance(item, BadFile) and item.path == str(target)
    if damage.endswith("index"):
        assert item.cause.startswith("corrupt pack index"), item.cause
    loader = ga.DeviceLoader(DataLoader(ds, batch_size=3, collate_fn=collate), device="cpu", on_error="raise")
    with pytest.raises(ga.DecodeError, match=str(target.name)):
        list(loader)


def test_a_damaged_frame_in_a_pack_is_named_by_its_number(tmp_path, photos):
    """A pack stores JPEG bytes as they were (their headers checked, not decoded); a frame damaged
    past its header names the pack and which frame (its number in the video folder's order) when
    a clip reads it, as FrameFolder names the frame's file."""
    video = tmp_path / "src" / "class" / "video"
    video.mkdir(parents=True)
    for t in range(12):
        Image.fromarray(np.ascontiguousarray(photos[0].permute(1, 2, 0).numpy()[t:t + 40, :48])).save(video / f"{t}.jpg")
    (video / "9.jpg").write_bytes((video / "9.jpg").read_bytes()[:400])  # truncated in its scan
    assert main(["pack", str(tmp_path / "src"), str(tmp_path / "packed"), "--no-progress"]) == 0
    assert frame_indices(12, 6) == [0, 2, 4, 7, 9, 11]
    item, _ = PackedClips(tmp_path / "packed", frames=6)[0]
    assert isinstance(item, BadFile) and item.path == str(tmp_path / "packed" / "class" / "video.pack")
    assert item.cause.startswith("frame 9 of 12: ") and "truncated" in item.cause, item.cause
    assert FrameFolder(tmp_path / "src", frames=6)[0][0].path == str(video / "9.jpg")
    assert PackedClips(tmp_path / "packed", frames=4)[0][0].shape == (4, 3, 40, 48)  # frames 0, 4, 7, 11: all good


def test_clip_datasets_on_error_skip_reaches_the_loader(tmp_path, photos):
    """FrameFolder and PackedClips take on_error as the image datasets do: "skip" drops a clip
    with a damaged frame (the loader used to raise unless told on_error="skip" itself)."""
    for v in range(2):
        video = tmp_path / "src" / "class" / f"video{v}"
        video.mkdir(parents=True)
        for t in range(4):
            Image.fromarray(np.ascontiguousarray(photos[0].permute(1, 2, 0).numpy()[t:t + 40, :48])).save(
                video / f"{t}.jpg")
    (tmp_path / "src" / "class" / "video1" / "2.jpg").write_bytes(
        (tmp_path / "src" / "class" / "video1" / "2.jpg").read_bytes()[:400])  # truncated in its scan
    assert main(["pack", str(tmp_path / "src"), str(tmp_path / "packed"), "--no-progress"]) == 0
    for ds in (FrameFolder(tmp_path / "src", frames=4, on_error="skip"),
               PackedClips(tmp_path / "packed", frames=4, on_error="skip")):
        loader = ga.DeviceLoader(DataLoader(ds, batch_size=2, collate_fn=collate), device="cpu")
        with pytest.warns(RuntimeWarning, match="video1"):
            (clips, labels), = list(loader)
        assert clips.shape == (1, 4, 3, 40, 48) and loader.stats.skipped == 1
    with pytest.raises(ValueError, match="on_error should be one of"):
        FrameFolder(tmp_path / "src", on_error="ignore")
    assert PackedClips(tmp_path / "packed").on_error == "raise"


def test_packed_clips_with_workers_and_one_draw_per_clip(frames_root, tmp_path):
    main(["pack", str(frames_root), str(tmp_path / "packed"), "--no-progress"])
    ds = PackedClips(tmp_path / "packed", frames=4)
    dl = DataLoader(ds, batch_size=3, num_workers=2, collate_fn=collate,
                    timeout=WORKER_TIMEOUT_S, multiprocessing_context=multiprocessing.get_context("fork"))
    pipe = ga.Pipeline(ga.RandomResizedCrop(64), ga.RandomHorizontalFlip(), ga.ColorJitter(0.3, 0.3, 0.3, 0.1),
                       device="cpu", seed=0)
    (clips, labels), = list(ga.DeviceLoader(dl, pipe))
    assert clips.shape == (3, 4, 3, 64, 64) and labels.tolist() == [0, 0, 1]
    # one draw per clip: the same frames through the clip's params, one frame at a time, agree
    raw = torch.stack([ds[i][0] for i in range(3)])
    out, params = pipe(raw, return_params=True)
    frame = pipe(raw[1, 2][None], params=[{k: v[1:2] for k, v in p.items()} for p in params])
    assert torch.allclose(out[1, 2], frame[0], atol=1e-5)


class RaggedClips(torch.utils.data.Dataset):
    """Clips of 3 frames cut from real photos at different sizes."""

    def __init__(self, photos):
        self.clips = [torch.stack([p[:, t * 8: t * 8 + 100 + 20 * i, : 150 + 10 * i] for t in range(3)])
                      for i, p in enumerate(photos)]

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        return self.clips[i], i


def test_clips_of_different_sizes_cross_from_workers_as_one_buffer(photos):
    ds = RaggedClips(photos)
    dl = DataLoader(ds, batch_size=len(ds), num_workers=1, collate_fn=collate,
                    timeout=WORKER_TIMEOUT_S, multiprocessing_context=multiprocessing.get_context("fork"))
    (clips, labels, bad), = list(dl)
    assert isinstance(clips, ga.PackedImages) and clips.clips and len(clips) == len(ds) and bad == []
    assert "PackedImages(4 clips" in repr(clips)
    for i, clip in enumerate(clips):
        assert torch.equal(clip, ds.clips[i]) and clip.untyped_storage().data_ptr() == clips.flat.untyped_storage().data_ptr()
    frames = clips.frames()  # the same buffer, frame by frame
    assert len(frames) == 3 * len(ds) and frames.flat is clips.flat and torch.equal(frames[4], ds.clips[1][1])
    pipe = ga.Pipeline(ga.RandomResizedCrop(48), ga.RandomRotation(10), ga.ColorJitter(0.3, 0.3, 0.3, 0.1),
                       device="cpu", seed=0)
    (out, y), = list(ga.DeviceLoader(dl, pipe))
    assert out.shape == (4, 3, 3, 48, 48) and y.tolist() == [0, 1, 2, 3]
    _, params = pipe(ds.clips, return_params=True)  # a fresh draw, replayed on the list of clips
    assert torch.equal(pipe(clips, params=params), pipe(ds.clips, params=params))


def test_pack_command_reports_bad_source(tmp_path, capsys):
    assert main(["pack", str(tmp_path / "missing"), str(tmp_path / "out"), "--no-progress"]) == 2
    assert "missing" in capsys.readouterr().err


def test_pack_command_reports_a_destination_it_cannot_write(frames_root, tmp_path, capsys):
    """DST is a file: a traceback (NotADirectoryError from mkdir) before; now one line and exit 2."""
    (tmp_path / "a_file").write_text("")
    assert main(["pack", str(frames_root), str(tmp_path / "a_file"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuaug pack: cannot write under {tmp_path / 'a_file'}") and "Not a directory" in err


def test_pack_stops_at_a_video_without_frames_or_leaves_it_out(frames_root, tmp_path, capsys):
    """A frame folder without JPEGs: `gpuaug pack` stops and names it (and the flag that would go
    on), or with --on-error skip packs the others and names it; the API warns."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(frames_root, src)
    (src / "class1" / "empty_video").mkdir()
    assert main(["pack", str(src), str(tmp_path / "a"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "empty_video: no JPEG frames" in err and "--on-error skip" in err
    assert main(["pack", str(src), str(tmp_path / "b"), "--no-progress", "--on-error", "skip"]) == 0
    out, err = capsys.readouterr()
    assert "packed 3 videos" in out and "skipped 1" in out and "skipping" in err and "empty_video" in err
    assert sorted(p.name for p in (tmp_path / "b").rglob("*.pack")) == ["video0.pack", "video1.pack", "video2.pack"]
    assert len(PackedClips(tmp_path / "b", frames=3)) == 3
    with pytest.warns(RuntimeWarning, match="skipping .*empty_video"):
        assert ga.data.pack_folder(src, tmp_path / "c", progress=False, on_error="skip") == (3, 0, 1)
    with pytest.raises(ValueError, match="on_error"):
        ga.data.pack_folder(src, tmp_path / "d", progress=False, on_error="ignore")


@pytest.mark.parametrize("bad", ["error page", "cut before its size", "absurd size", "another size"])
def test_pack_checks_each_frames_header_and_names_a_frame_that_is_no_image(bad, frames_root, tmp_path, capsys, photos):
    """A frame with no image header (an error page saved as .jpg, a file cut before its frame
    header), one whose header claims absurd dimensions, or one of another size than the video's
    first frame stops `gpuaug pack`, named, before that video's pack is written (it was packed,
    and found only when a clip read it, in training); --on-error skip leaves the video out."""
    import io
    import shutil

    src = tmp_path / "src"
    shutil.copytree(frames_root, src)
    frame = sorted((src / "class0").iterdir())[0] / "frame_0001.jpg"
    assert frame.is_file()
    good = frame.read_bytes()
    if bad == "error page":
        frame.write_bytes(b"<html><body>404 Not Found</body></html>")
    elif bad == "cut before its size":
        frame.write_bytes(good[:good.index(b"\xff\xc0")])  # SOI, JFIF, tables; no frame header
    elif bad == "another size":  # a resolution change inside the video: no clip of it could be stacked
        Image.open(io.BytesIO(good)).resize((20, 16)).save(frame, "JPEG")
    else:
        buffer = io.BytesIO()
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buffer, "JPEG")
        data = bytearray(buffer.getvalue())
        at = data.index(b"\xff\xc0") + 5  # the frame header's height, width
        data[at:at + 4] = (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big")
        frame.write_bytes(bytes(data))
    assert main(["pack", str(src), str(tmp_path / "a"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(frame) in err and "--on-error skip" in err
    assert {"error page": "no image header", "cut before its size": "no image header", "absurd size": "absurd dimensions",
            "another size": "16x20 pixels, where the video's first frame has 160x200"}[bad] in err, err
    assert not (tmp_path / "a" / "class0" / f"{frame.parent.name}.pack").exists()
    assert main(["pack", str(src), str(tmp_path / "b"), "--no-progress", "--on-error", "skip"]) == 0
    out, err = capsys.readouterr()
    assert "skipped 1" in out and str(frame) in err
    assert len(PackedClips(tmp_path / "b", frames=2)) == len(FrameFolder(src, frames=2)) - 1


def _aged_copy(frames_root, dst):
    """A copy of the frame folders, then a pause past the file system's clock tick (its change
    times cannot be set back), so that a pack written now is newer than every frame."""
    import shutil
    import time

    shutil.copytree(frames_root, dst)
    time.sleep(0.05)
    return dst


def test_packed_clips_keep_the_labels_of_the_frame_folders_when_a_class_has_no_pack(frames_root, tmp_path):
    """A class whose videos were all left out (--on-error skip) got no folder under DST, so
    PackedClips numbered the classes after it one lower than FrameFolder did: every pack folder of
    the source's classes is made now, and a class folder without videos is refused, naming it
    (torchvision's rule), unless allow_empty=True."""
    import shutil

    src, dst = _aged_copy(frames_root, tmp_path / "src"), tmp_path / "dst"
    for frame in (src / "class1" / "video1").iterdir():
        frame.unlink()  # class1's only video: no frames left
    shutil.copytree(src / "class0" / "video2", src / "class2" / "video9")
    shutil.copytree(src / "class0" / "video2", src / "class2" / "video9-b")  # "video9-b.pack" < "video9.pack"
    (src / "class15").mkdir()  # a class folder without videos
    with pytest.raises(FileNotFoundError, match=r"class folder\(s\) \['class15'\].*allow_empty=True"):
        FrameFolder(src)
    frames = FrameFolder(src, allow_empty=True)
    assert frames.classes == ["class0", "class1", "class15", "class2"]
    with pytest.warns(RuntimeWarning) as caught:
        assert ga.data.pack_folder(src, dst, progress=False, on_error="skip") == (4, 0, 1)
    said = [str(w.message) for w in caught]
    assert any("video1: no JPEG frames" in m for m in said)
    assert any("class folder(s) ['class1', 'class15'] under" in m and "allow_empty=True" in m for m in said), said
    with pytest.raises(FileNotFoundError, match=r"class folder\(s\) \['class1', 'class15'\]"):
        PackedClips(dst)
    packs = PackedClips(dst, allow_empty=True)
    assert packs.classes == frames.classes
    # The same videos in the same order (item i of one is item i of the other), with the same labels.
    listed = [(Path(v).relative_to(src).as_posix(), y) for v, y in frames.videos]
    assert [(Path(p).relative_to(dst).with_suffix("").as_posix(), y) for p, y in packs.videos] == \
        [(v, y) for v, y in listed if v != "class1/video1"]
    assert listed[-2:] == [("class2/video9", 3), ("class2/video9-b", 3)]


def _pack_times(root):
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*.pack")}


def test_pack_reruns_only_what_changed_and_force_rewrites_all(frames_root, tmp_path, capsys):
    """A rerun leaves packs newer than their frames as they are (an interrupted pack resumes), and
    repacks a video whose frame was rewritten (even with its old modification time kept, as
    `cp -p` does), or that gained a frame, or whose pack is gone."""
    import os
    import time

    src, dst = _aged_copy(frames_root, tmp_path / "src"), tmp_path / "dst"
    assert ga.data.pack_folder(src, dst, progress=False) == (3, 0, 0)
    first = _pack_times(dst)
    assert main(["pack", str(src), str(dst), "--no-progress"]) == 0
    assert "packed 0 videos" in capsys.readouterr().out and _pack_times(dst) == first
    assert ga.data.pack_folder(src, dst, progress=False) == (0, 3, 0)
    # Strictly newer: a pack whose time is its newest frame's (the same clock tick) is not current.
    video, pack = src / "class0" / "video0", dst / "class0" / "video0.pack"
    frames = sorted(str(p) for p in video.iterdir())
    newest = max(max(st.st_mtime_ns, st.st_ctime_ns) for st in map(os.stat, [video, *frames]))
    for written, current in ((newest, False), (newest + 1, True)):
        os.utime(pack, ns=(written, written))
        assert ga.data.clips.pack_is_current(pack, video, frames) is current

    frame = src / "class0" / "video0" / "frame_0007.jpg"  # rewritten in place, its old time kept (cp -p)
    old_time = frame.stat().st_mtime
    frame.write_bytes((src / "class0" / "video0" / "frame_0008.jpg").read_bytes())
    os.utime(frame, (old_time, old_time))
    frames = sorted(str(p) for p in (src / "class0" / "video0").iterdir())
    assert not ga.data.clips.pack_is_current(dst / "class0" / "video0.pack", src / "class0" / "video0", frames)
    (src / "class1" / "video1" / "frame_0005.jpg").write_bytes((src / "class1" / "video1" / "frame_0004.jpg").read_bytes())
    (dst / "class0" / "video2.pack").unlink()
    time.sleep(0.01)  # past the clock tick of the writes above
    assert ga.data.pack_folder(src, dst, progress=False) == (3, 0, 0)
    assert ga.data.pack_folder(src, dst, progress=False) == (0, 3, 0)
    assert len(PackedClips(dst, frames=1)) == 3 and ga.data.clips.pack_length(str(dst / "class1" / "video1.pack")) == 6

    pack = dst / "class0" / "video2.pack"  # a pack of another format version is not current
    data = bytearray(pack.read_bytes())
    data[8:12] = (ga.data.clips.PACK_VERSION + 1).to_bytes(4, "little")
    pack.write_bytes(bytes(data))
    time.sleep(0.01)
    assert ga.data.pack_folder(src, dst, progress=False) == (1, 2, 0)

    before = _pack_times(dst)
    time.sleep(0.01)
    assert main(["pack", str(src), str(dst), "--no-progress", "--force"]) == 0
    assert "packed 3 videos" in capsys.readouterr().out
    assert all(t > before[k] for k, t in _pack_times(dst).items())


def test_an_interrupted_pack_resumes_and_leaves_no_temporary_file(frames_root, tmp_path, monkeypatch):
    """Ctrl-C while a pack is being written: the packs done stay, the one being written leaves no
    file (neither half a pack nor its temporary), and the rerun packs only the rest."""
    from gpuaug.data import clips

    src, dst = _aged_copy(frames_root, tmp_path / "src"), tmp_path / "dst"
    real_header = clips._HEADER
    calls = []

    class Interrupting:  # the second pack is interrupted after its header is written
        size = real_header.size

        def pack(self, *args):
            calls.append(args)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real_header.pack(*args)

    monkeypatch.setattr(clips, "_HEADER", Interrupting())
    with pytest.raises(KeyboardInterrupt):
        ga.data.pack_folder(src, dst, progress=False)
    monkeypatch.setattr(clips, "_HEADER", real_header)
    assert [p.name for p in dst.rglob("*") if p.is_file() and p.name != clips.PACKS_MARK] == ["video0.pack"]
    assert ga.data.pack_folder(src, dst, progress=False) == (2, 1, 0)
    assert len(PackedClips(dst, frames=2)) == 3


def test_a_pack_whose_temporary_cannot_be_opened_raises_that_error(frames_root, tmp_path, monkeypatch):
    """A full disk as the temporary file is opened: its OSError comes out, not a FileNotFoundError
    from removing a temporary that was never made."""
    import errno

    from gpuaug.data import clips

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(clips, "open", full_disk, raising=False)
    with pytest.raises(OSError, match="No space left on device"):
        clips.pack_frames(sorted(next(frames_root.rglob("*.jpg")).parent.glob("*.jpg")), tmp_path / "v.pack")
    assert list(tmp_path.iterdir()) == []


def test_pack_names_packs_its_source_no_longer_has(frames_root, tmp_path, capsys):
    """A video removed from the source, or skipped as bad, keeps its older pack (PackedClips would
    read it): the run names it instead of leaving it unseen."""
    import shutil

    src, dst = _aged_copy(frames_root, tmp_path / "src"), tmp_path / "dst"
    ga.data.pack_folder(src, dst, progress=False)
    shutil.rmtree(src / "class0" / "video2")
    for frame in (src / "class1" / "video1").iterdir():
        frame.unlink()
    assert main(["pack", str(src), str(dst), "--no-progress", "--on-error", "skip"]) == 0
    out, err = capsys.readouterr()
    assert "packed 0 videos" in out and "1 already up to date" in out and "skipped 1" in out
    assert f"its older pack {dst / 'class1' / 'video1.pack'} is still there" in err
    assert "1 pack(s) under" in err and str(dst / "class0" / "video2.pack") in err
    for count, end in ((3, "v2.pack"), (4, "v2.pack and 1 more"), (5, "v2.pack and 2 more")):  # three named, the rest counted
        many = tmp_path / f"many{count}"
        (many / "c").mkdir(parents=True)
        for k in range(count):
            (many / "c" / f"v{k}.pack").write_bytes(b"")
        with pytest.warns(RuntimeWarning, match=f"{count} pack.s. under") as caught:
            ga.data.clips._warn_of_orphans(many, set())
        message = str(caught[0].message)
        assert message.endswith(end) and "v0.pack" in message and "v3.pack" not in message, message


def test_the_pack_format_is_the_one_written_down(frames_root, tmp_path):
    """A pack file, byte for byte as clips.py's docstring describes it: magic ``GPUAUGPK``, format
    version 1 and the frame count (uint32 little-endian), n + 1 uint64 offsets (each frame's start,
    then the file's end), then the frames' JPEG bytes as they were. Built here by hand from that
    description: ``pack_frames`` writes exactly it, and ``read_pack`` reads it. (A change of the
    format, or of its version, which turns every earlier pack stale, fails here first: it must be
    meant.)"""
    import struct

    from gpuaug.data import clips

    paths = sorted((frames_root / "class1" / "video1").glob("*.jpg"))
    blobs = [p.read_bytes() for p in paths]
    starts = [8 + 4 + 4 + 8 * (len(blobs) + 1)]
    for b in blobs:
        starts.append(starts[-1] + len(b))
    by_hand = b"GPUAUGPK" + struct.pack("<II", 1, len(blobs)) + struct.pack(f"<{len(starts)}Q", *starts) + b"".join(blobs)
    assert clips.pack_frames(paths, tmp_path / "v.pack") == len(by_hand)  # its size
    assert (tmp_path / "v.pack").read_bytes() == by_hand
    (tmp_path / "by_hand.pack").write_bytes(by_hand)
    frames = clips.read_pack(str(tmp_path / "by_hand.pack"), [4, 0, 2])
    assert [bytes(f.numpy()) for f in frames] == [blobs[4], blobs[0], blobs[2]]
    assert clips.pack_length(str(tmp_path / "by_hand.pack")) == len(blobs) == 5


def test_read_pack_reads_only_the_wanted_frames_of_a_long_video(frames_root, tmp_path, monkeypatch):
    """8 frames of a long video's pack were read as the whole span between the first and the last
    (a film's pack read whole for one clip). Past twice the wanted bytes plus the slack each frame
    is read alone; either way the frames are the frame files' bytes, in the order asked."""
    import builtins

    from gpuaug.data import clips

    video = frames_root / "class0" / "video0"
    paths = sorted(str(p) for p in video.iterdir())
    clips.pack_frames(paths, tmp_path / "v.pack")
    wanted = [0, 11, 5, 5, 3]
    expected = [open(paths[i], "rb").read() for i in wanted]
    read = []

    class Counting:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def read(self, n=-1):
            out = self.f.read(n)
            read.append(len(out))
            return out

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(clips, "open", lambda *a, **k: Counting(builtins.open(*a, **k)), raising=False)
    for slack, one_read in ((1 << 30, True), (0, False)):
        monkeypatch.setattr(clips, "_SPAN_SLACK", slack)
        read.clear()
        frames = clips.read_pack(str(tmp_path / "v.pack"), wanted)
        assert [bytes(f.numpy()) for f in frames] == expected
        header_and_index = clips._HEADER.size + 8 * (len(paths) + 1)
        span = sum(len(open(p, "rb").read()) for p in paths)  # frames 0..11: the whole video
        needed = sum(len(open(paths[i], "rb").read()) for i in set(wanted))
        assert sum(read) == header_and_index + (span if one_read else needed)


def test_a_pack_folder_inside_the_frame_folders_is_not_read_as_videos(frames_root, tmp_path):
    """`gpuaug pack data data/packed` worked once, then every rerun stopped: the packs' class
    folders were listed as videos without frames. They are left out of the source; the same
    folder for both works too (packs sit beside the video folders, each reader takes its own)."""
    src = _aged_copy(frames_root, tmp_path / "src")
    for _ in range(2):
        assert main(["pack", str(src), str(src / "packed"), "--no-progress"]) == 0
    assert ga.data.pack_folder(src, src / "packed", progress=False) == (0, 3, 0)
    assert len(PackedClips(src / "packed")) == 3
    # Training on the frames afterwards: the packs are not a class (they shifted later labels) nor
    # videos, whether they sort before the classes or sit inside one.
    for dst in (src / "aa_packs", src / "class1" / "packed"):
        assert ga.data.pack_folder(src, dst, progress=False) == (3, 0, 0)
        folder, packed = FrameFolder(src, frames=2), PackedClips(dst, frames=2)
        assert folder.classes == packed.classes == ["class0", "class1"]
        assert [(Path(v).name, y) for v, y in folder.videos] == [(Path(v).stem, y) for v, y in packed.videos]
    same = _aged_copy(frames_root, tmp_path / "same")
    assert ga.data.pack_folder(same, same, progress=False) == (3, 0, 0)
    assert ga.data.pack_folder(same, same, progress=False) == (0, 3, 0)
    assert len(PackedClips(same)) == 3 and len(FrameFolder(same)) == 3


@pytest.mark.parametrize("where", ["class", "video", "class, by another path"])
def test_pack_refuses_a_destination_that_is_a_class_or_video_folder_of_the_source(frames_root, tmp_path, capsys,
                                                                                  where):
    """`gpuaug pack data data/class0` packed nothing (the class's videos lay inside DST, so were
    left out), said "packed 0 videos" and left DST's mark in the class folder: FrameFolder(data)
    and every later pack then no longer saw that class (its labels shifted). Refused now, with
    nothing written."""
    src = _aged_copy(frames_root, tmp_path / "src")
    dst = {"class": src / "class1", "video": src / "class0" / "video0",
           "class, by another path": src / "class0" / ".." / "class1"}[where]
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    with pytest.raises(ValueError, match=f"is the {where.split(',')[0]} folder"):
        ga.data.pack_folder(src, dst, progress=False)
    assert main(["pack", str(src), str(dst), "--no-progress"]) == 2
    assert f"is the {where.split(',')[0]} folder" in capsys.readouterr().err
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before
    assert FrameFolder(src).classes == ["class0", "class1"] and len(FrameFolder(src)) == 3


def test_a_class_folder_holding_the_packs_mark_is_named_not_silently_dropped(frames_root, tmp_path):
    """A class folder marked as packs (by hand, or by `gpuaug pack data data/<class>` before that
    was refused) is left out of the classes; it holds video folders of frames, so a warning names
    it and the mark to delete. A real folder of packs inside the frames warns of nothing."""
    src = _aged_copy(frames_root, tmp_path / "src")
    ga.data.pack_folder(src, src / "packed", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the packs' own folder: no warning
        assert FrameFolder(src).classes == ["class0", "class1"]
    (src / "class1" / ".gpuaug-packs").touch()
    with pytest.warns(RuntimeWarning, match=r"class1' holds \.gpuaug-packs .* video folders of frames \(video1\)") as caught:
        assert FrameFolder(src).classes == ["class0"]
    assert caught[0].filename == __file__  # the user's line, not gpuaug's
