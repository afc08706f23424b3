"""Video clips, decode-only: a folder of JPEG frames per video, or one packed file per video.

Layout (UCF101 frames): ``root/<class>/<video>/<frame>.jpg`` for :class:`FrameFolder`, and
``root/<class>/<video>.pack`` for :class:`PackedClips` (written by :func:`pack_frames` /
``gpuaug pack SRC DST``). A clip is ``frames`` frames spread evenly over the video, uint8
``(T, 3, H, W)``; a :class:`gpuaug.Pipeline` then gives the whole clip one draw.

The pack format puts all of a video's JPEG bytes in ONE file behind an offset index, so reading a
clip is one open and one sequential read instead of T small-file reads (a read per frame where
the frames between would be most of the span). Each read opens its own file handle, so any number
of DataLoader workers can read at once (unlike one shared HDF5 file).

A pack file, all integers little-endian: the magic ``GPUAUGPK`` (8 bytes), the format version
(uint32, :data:`PACK_VERSION`: a pack of another version is stale to ``gpuaug pack``) and the frame
count ``n`` (uint32); ``n + 1`` uint64 offsets (where each frame's bytes start, then the file's
size); then the frames' JPEG files, byte for byte, in time order.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import NamedTuple

import torch
from torch.utils.data import Dataset

from ..user_warnings import warn
from .datasets import BadFile, checked_policy
from .decode import DecodeError, check_size, decode_rgb, read_bytes

PACK_MAGIC = b"GPUAUGPK"
PACK_VERSION = 1
_HEADER = struct.Struct("<8sII")  # magic, version, frame count
_FRAME_EXTENSIONS = (".jpg", ".jpeg")
# read_pack reads the span from the first wanted frame to the last in one read while it is at most
# twice the wanted frames' bytes plus this much; past that, each wanted frame alone.
_SPAN_SLACK = 4 << 20


def frame_indices(n_frames: int, frames: int) -> list[int]:
    """``frames`` indices spread evenly over ``n_frames`` (repeating frames of a short video)."""
    if n_frames <= 0:
        raise ValueError(f"a video needs at least one frame, got {n_frames}")
    frames = _check_frames(frames)  # (0 gave no indices, 2.5 a TypeError of range's)
    if frames == 1:
        return [n_frames // 2]
    return [round(i * (n_frames - 1) / (frames - 1)) for i in range(frames)]


# The file pack_folder leaves in its destination: a folder holding it is packs, never a class
# or a video of the frame folders it may sit in (``gpuaug pack data data/packed``).
PACKS_MARK = ".gpuaug-packs"


def _videos(root: Path, is_video, allow_empty: bool) -> tuple[list[str], list[tuple[str, int]]]:
    """Class folders (sorted) and ``(video, label)`` pairs under ``root``; a class folder without
    videos is a FileNotFoundError naming it (torchvision's rule for class folders) unless
    ``allow_empty``, where it keeps its index. Folders of packs (:func:`pack_folder`'s
    destination, marked) are neither classes nor videos."""
    if not root.is_dir():
        raise FileNotFoundError(f"clip root {str(root)!r} is not a directory")
    folders = [e for e in os.scandir(root) if e.is_dir()]
    _warn_of_marked_frame_folders([e.path for e in folders if _holds_packs(e.path)])
    classes = sorted(e.name for e in folders if not _holds_packs(e.path))
    # Sorted by video name, a pack's without its ".pack": PackedClips lists its videos in
    # FrameFolder's order (by full name "v1-b.pack" would come before "v1.pack", "v1" before "v1-b").
    by_name = lambda p: p.name.removesuffix(".pack")  # noqa: E731
    videos = [(str(p), i) for i, c in enumerate(classes) for p in sorted((root / c).iterdir(), key=by_name)
              if is_video(p) and not (p.is_dir() and _holds_packs(p))]
    if not videos:
        raise FileNotFoundError(f"no videos found under {str(root)!r} (expected root/<class>/<video>)")
    empty = sorted(set(classes) - {classes[label] for _, label in videos})
    if empty and not allow_empty:
        raise FileNotFoundError(f"no videos in the class folder(s) {empty} of {str(root)!r} (allow_empty=True keeps "
                                f"them as classes without clips, so every class keeps its label)")
    return classes, videos


def _holds_packs(folder) -> bool:
    return os.path.exists(os.path.join(folder, PACKS_MARK))


def _warn_of_marked_frame_folders(marked: list[str]) -> None:
    """Warn of folders left out as packs (marked) that hold video folders of JPEG frames: a class
    folder marked by mistake (``gpuaug pack data data/<class>`` before it was refused) would
    otherwise vanish from the labels without a word."""
    def has_frames(path: str) -> bool:
        try:
            return any(f.lower().endswith(_FRAME_EXTENSIONS) for f in os.listdir(path))
        except OSError:  # unreadable: not this check's to report
            return False

    for folder in marked:
        videos = [e.name for e in os.scandir(folder) if e.is_dir() and has_frames(e.path)]
        if videos:
            warn(f"gpuaug: {folder!r} holds {PACKS_MARK} (a folder of packs, read as neither a class "
                 f"nor a video) but also video folders of frames ({', '.join(sorted(videos)[:3])}"
                 f"{', ...' if len(videos) > 3 else ''}): it is left out; if it is a class, delete "
                 f"{os.path.join(folder, PACKS_MARK)!r}")


def _natural_key(name: str) -> list:
    """Sort key: runs of digits compare as numbers, the rest as text (``img2`` < ``img10``)."""
    return [(0, int(part), part) if part.isdigit() else (1, part, "") for part in re.split(r"(\d+)", name)]


def _check_frames(frames) -> int:
    if not isinstance(frames, int) or isinstance(frames, bool) or frames < 1:
        raise ValueError(f"frames should be an int >= 1, got {frames!r}")
    return frames


def _stack_frames(path: str, images: list[torch.Tensor]) -> torch.Tensor:
    if len({tuple(t.shape) for t in images}) != 1:
        raise DecodeError(path, f"frames of different sizes {sorted({tuple(t.shape) for t in images})}")
    return torch.stack(images)


class ClipDataset(Dataset):
    """What :class:`FrameFolder` and :class:`PackedClips` share: the ``root/<class>/<video>``
    entries that ``is_video`` takes, labelled by the class folders' sorted order (a class folder
    without videos is a FileNotFoundError unless ``allow_empty=True``), ``frames`` per clip, and
    ``on_error`` (``"raise"`` or ``"skip"``) for a clip that comes as a :class:`BadFile`, applied
    by :class:`gpuaug.DeviceLoader`."""

    def __init__(self, root: str | os.PathLike[str], frames: int = 8, allow_empty: bool = False,
                 on_error: str = "raise"):
        self.root, self.frames, self.on_error = Path(root), _check_frames(frames), checked_policy(on_error)
        self.classes, self.videos = _videos(self.root, self.is_video, allow_empty)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    @staticmethod
    def is_video(path: Path) -> bool:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.videos)


class FrameFolder(ClipDataset):
    """Clips from ``root/<class>/<video>/<frame>.jpg``: items ``(uint8 (T, 3, H, W), label)``,
    or a :class:`BadFile` for a clip with an unreadable frame. Arguments as :class:`ClipDataset`'s."""

    @staticmethod
    def is_video(path: Path) -> bool:
        return path.is_dir()

    def frame_paths(self, index: int) -> list[str]:
        """The video's frames in time order: names sorted with their numbers read as numbers, so
        ``2.jpg`` comes before ``10.jpg`` (ffmpeg's ``%d.jpg``) as ``frame_002.jpg`` before ``frame_010.jpg``."""
        video = self.videos[index][0]
        names = sorted((f for f in os.listdir(video) if f.lower().endswith(_FRAME_EXTENSIONS)), key=_natural_key)
        return [os.path.join(video, f) for f in names]

    def __getitem__(self, index: int):
        video, label = self.videos[index]
        try:
            paths = self.frame_paths(index)
            if not paths:
                raise DecodeError(video, "no JPEG frames in this video folder")
            chosen = [paths[i] for i in frame_indices(len(paths), self.frames)]
            return _stack_frames(video, [decode_rgb(p, read_bytes(p)) for p in chosen]), label
        except DecodeError as e:
            return BadFile(e.path, e.cause), label


def pack_frames(frame_paths, dst) -> int:
    """Write the JPEG bytes of ``frame_paths`` (in order) to one pack file ``dst``; returns its size.
    It is written under a temporary name and renamed: ``dst`` is never half-written. Each frame's
    header is checked, not decoded (:func:`check_size`): a file that is no image (no header
    torchvision or PIL reads: an error page saved as .jpg, a file cut before its size) or whose
    header claims absurd dimensions, or another size than the first frame's (a clip's frames are
    one tensor), raises :class:`DecodeError` naming it, before anything is written; a frame
    damaged past its header is found when a clip reads it."""
    if isinstance(frame_paths, (str, bytes, os.PathLike)):  # its characters are no frames ("/": a directory)
        raise TypeError(f"frame_paths should be a list of frame files, got one {type(frame_paths).__name__}: "
                        f"{frame_paths!r} (pack_frames([path], dst) for one frame)")
    blobs, first = [], None
    for p in frame_paths:
        data = read_bytes(p)
        size = check_size(p, data)
        if size is None:
            raise DecodeError(str(p), "no image header (not a JPEG, nor another image torchvision or PIL reads, "
                                      "or cut before its size)")
        first = first or size
        if size != first:  # (header sizes: video frames carry no EXIF turn, which would swap them)
            raise DecodeError(str(p), f"{size[0]}x{size[1]} pixels, where the video's first frame has "
                                      f"{first[0]}x{first[1]}: a clip's frames must be of one size")
        blobs.append(data.numpy().tobytes())
    if not blobs:
        raise ValueError(f"no frames to pack into {dst}")
    offsets, pos = [], _HEADER.size + 8 * (len(blobs) + 1)
    for b in blobs:
        offsets.append(pos)
        pos += len(b)
    offsets.append(pos)
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{dst}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(PACK_MAGIC, PACK_VERSION, len(blobs)))
            f.write(struct.pack(f"<{len(offsets)}Q", *offsets))
            for b in blobs:
                f.write(b)
        os.replace(tmp, dst)
    except BaseException:  # a full disk, Ctrl-C: no temporary file left behind
        Path(tmp).unlink(missing_ok=True)
        raise
    return pos


class PackCounts(NamedTuple):
    """What :func:`pack_folder` did: videos ``packed`` (written), ``up_to_date`` (their pack was
    newer than their frames: left as they were) and ``skipped`` (bad, ``on_error="skip"``)."""

    packed: int
    up_to_date: int
    skipped: int


def pack_is_current(pack, video, frame_paths) -> bool:
    """Whether ``pack`` holds ``video``'s frames as they are now: it exists, holds as many frames,
    and was written after the video folder last changed (frames added, removed or renamed) and
    after each frame file last changed. A file's change time counts, not only its modification
    time, which ``cp -p`` or ``touch -d`` can set to the past. Timestamps are compared strictly (a
    pack written in the same clock tick as a frame is repacked)."""
    try:
        written = os.stat(pack).st_mtime_ns
        newest = max(max(st.st_mtime_ns, st.st_ctime_ns) for st in map(os.stat, [video, *frame_paths]))
        return written > newest and pack_length(str(pack)) == len(frame_paths)
    except (OSError, DecodeError):
        return False


def pack_folder(src, dst, progress: bool = True, on_error: str = "raise", force: bool = False) -> PackCounts:
    """Pack every ``src/<class>/<video>/`` frame folder into ``dst/<class>/<video>.pack``; returns
    :class:`PackCounts`. A video whose pack is current (:func:`pack_is_current`) is left as it is,
    so an interrupted run resumes where it stopped; ``force=True`` rewrites every pack. A video with
    no JPEG frames, or a frame that cannot be read or fails :func:`pack_frames`' header check,
    raises :class:`DecodeError` naming it
    (``on_error="raise"``: the packs written so far stay), or is left out with a ``RuntimeWarning``
    naming it (``on_error="skip"``). Every class folder of ``src`` gets its folder under ``dst``,
    with packs or without (a class whose videos were all left out, or a class folder without
    videos), so :class:`PackedClips` reads the labels :class:`FrameFolder` gives."""
    from ..progress import progress_bar

    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error should be 'raise' or 'skip', got {on_error!r}")
    src_ds = FrameFolder(src, frames=1, allow_empty=True)
    # DST inside SRC (``gpuaug pack data data/packed``): its class folders are not videos.
    packs = Path(dst).resolve()
    # DST a class or video folder of SRC: the mark written there would hide it (and its frames)
    # from FrameFolder and from every later run, and its videos would be taken for DST's own.
    for kind, folder in [*(("class", Path(src) / c) for c in src_ds.classes),
                         *(("video", Path(v)) for v, _ in src_ds.videos)]:
        if packs == folder.resolve():
            raise ValueError(f"dst {str(dst)!r} is the {kind} folder {str(folder)!r} of src: packs there would hide "
                             f"it from FrameFolder; pack into a folder of its own (e.g. {str(Path(src) / 'packed')!r}, "
                             f"or outside src) or into src itself")
    if packs != Path(src).resolve():
        src_ds.videos = [(v, label) for v, label in src_ds.videos if not Path(v).resolve().is_relative_to(packs)]
    with_videos = {label for _, label in src_ds.videos}
    classes = [c for i, c in enumerate(src_ds.classes)  # (a folder of SRC holding DST and no video is not a class)
               if i in with_videos or not packs.is_relative_to((Path(src) / c).resolve())]
    for c in classes:
        (Path(dst) / c).mkdir(parents=True, exist_ok=True)
    if packs != Path(src).resolve():  # so that FrameFolder(SRC) never takes DST for a class or a video
        Path(dst).mkdir(parents=True, exist_ok=True)
        (Path(dst) / PACKS_MARK).touch()
    packed = up_to_date = skipped = 0
    for i in progress_bar(range(len(src_ds)), desc="gpuaug pack", disable=not progress, unit="video"):
        video = Path(src_ds.videos[i][0])
        pack = _pack_path(dst, video)
        try:
            paths = src_ds.frame_paths(i)
            if not paths:
                raise DecodeError(str(video), "no JPEG frames in this video folder")
            if not force and pack_is_current(pack, video, paths):
                up_to_date += 1
                continue
            pack_frames(paths, pack)
        except DecodeError as e:
            if on_error == "raise":
                raise
            stale = f"; its older pack {pack} is still there" if pack.is_file() else ""
            warn(f"gpuaug pack: skipping {e}{stale}")
            skipped += 1
            continue
        packed += 1
    _warn_of_orphans(Path(dst), {_pack_path(dst, Path(v)) for v, _ in src_ds.videos})
    empty = [c for c in classes if not any((Path(dst) / c).glob("*.pack"))]
    if empty:
        warn(f"gpuaug pack: the class folder(s) {empty} under {dst} hold no pack (no video of theirs was "
             f"packed): PackedClips refuses them unless allow_empty=True, which keeps every class's label")
    return PackCounts(packed, up_to_date, skipped)


def _pack_path(dst, video: Path) -> Path:
    """Where ``video`` (``src/<class>/<video>``) is packed: ``dst/<class>/<video>.pack``."""
    return Path(dst) / video.parent.name / f"{video.name}.pack"


def _warn_of_orphans(dst: Path, expected: set[Path]) -> None:
    """Warn of packs under ``dst`` whose video is not in the source (removed or renamed since an
    earlier run): :class:`PackedClips` would still read them. They are named, not deleted."""
    orphans = sorted(str(p) for p in dst.glob("*/*.pack") if p not in expected)
    if orphans:
        shown = ", ".join(orphans[:3]) + (f" and {len(orphans) - 3} more" if len(orphans) > 3 else "")
        warn(f"gpuaug pack: {len(orphans)} pack(s) under {dst} have no video in the source (removed or "
             f"renamed since they were packed; PackedClips still reads them): {shown}")


def read_pack(path: str, indices: list[int]) -> list[torch.Tensor]:
    """The encoded bytes of frames ``indices`` of a pack file (uint8 1-D each, in the order asked):
    one sequential read of their span, or, where the frames between them would be most of that
    read (a long video), one read per wanted frame."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        n = _read_header(f, path)
        if _HEADER.size + 8 * (n + 1) > size:  # checked before reading: n may be garbage
            raise DecodeError(path, f"truncated pack index ({n} frames announced, file has {size} bytes)")
        table = f.read(8 * (n + 1))
        offsets = struct.unpack(f"<{n + 1}Q", table)
        if any(b < a for a, b in zip(offsets, offsets[1:])) or offsets[-1] != size:
            raise DecodeError(path, f"corrupt pack index or truncated file (index ends at {offsets[-1]}, file has {size} bytes)")
        wanted = [min(i, n - 1) for i in indices]
        lo, hi = offsets[min(wanted)], offsets[max(wanted) + 1]
        needed = sum(offsets[i + 1] - offsets[i] for i in set(wanted))
        if hi - lo <= 2 * needed + _SPAN_SLACK:
            f.seek(lo)
            data = torch.frombuffer(bytearray(f.read(hi - lo)), dtype=torch.uint8)
            return [data[offsets[i] - lo : offsets[i + 1] - lo] for i in wanted]
        # A long video: the frames between the wanted ones would be most of the read (a whole
        # film's pack for 8 frames), so each wanted frame is read alone, in file order.
        frames = {}
        for i in sorted(set(wanted)):
            f.seek(offsets[i])
            frames[i] = torch.frombuffer(bytearray(f.read(offsets[i + 1] - offsets[i])), dtype=torch.uint8)
    return [frames[i] for i in wanted]


def pack_length(path: str) -> int:
    """Number of frames in a pack file (at least 1: :class:`DecodeError` for none)."""
    with open(path, "rb") as f:
        return _read_header(f, path)


def _read_header(f, path: str) -> int:
    """The frame count in the header of the open pack file ``f``; :class:`DecodeError` naming
    ``path`` for a file that is not a pack (or is cut before its header end), a pack of another
    format version (gpuaug pack writes it anew), or one announcing no frame."""
    head = f.read(_HEADER.size)
    if len(head) < _HEADER.size or head[:8] != PACK_MAGIC:
        raise DecodeError(path, f"not a gpuaug pack file ({len(head)} header bytes, magic {head[:8]!r})")
    _, version, n = _HEADER.unpack(head)
    if version != PACK_VERSION:
        raise DecodeError(path, f"pack format version {version}, this gpuaug reads {PACK_VERSION} (gpuaug pack writes it anew)")
    if n == 0:  # pack_frames never writes one
        raise DecodeError(path, "corrupt pack file (0 frames announced)")
    return n


def _decode_frame(path: str, i: int, n: int, data: torch.Tensor) -> torch.Tensor:
    """Frame ``i`` of the ``n`` in pack ``path``, decoded; a :class:`DecodeError` says which frame
    (counted from 0, in the order packed: the video folder's frames sorted by name)."""
    try:
        return decode_rgb(path, data)
    except DecodeError as e:
        raise DecodeError(path, f"frame {i} of {n}: {e.cause}") from None


class PackedClips(ClipDataset):
    """Clips from ``root/<class>/<video>.pack``: items ``(uint8 (T, 3, H, W), label)``, or a
    :class:`BadFile` naming the pack file for a corrupt or truncated one. Labels as
    :class:`FrameFolder`'s (:func:`pack_folder` makes every class folder of the source, so the
    two agree). Arguments as :class:`ClipDataset`'s."""

    @staticmethod
    def is_video(path: Path) -> bool:
        return path.suffix == ".pack" and path.is_file()

    def __getitem__(self, index: int):
        path, label = self.videos[index]
        try:
            n = pack_length(path)
            chosen = frame_indices(n, self.frames)
            return _stack_frames(path, [_decode_frame(path, i, n, b) for i, b in zip(chosen, read_pack(path, chosen))]), label
        except DecodeError as e:
            return BadFile(path, e.cause), label
        except OSError as e:
            return BadFile(path, f"cannot read ({e})"), label
