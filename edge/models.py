"""Model directories: where they are, what ``manifest.json`` says, and checking it.

A model directory holds LiteRT artifacts (one per input shape and precision) and a
``manifest.json`` listing, for each, its file, shape, precision, size, SHA-256 and
provenance: the SHA-256 of the weights it was converted from, or ``random-init:SEED``
for the seeded random weights used in tests and benchmarks. Anything made from
random weights says so here and in every result produced from it.

Lookup order for the directory: an explicit argument, then ``$DA3_EDGE_MODELS``, then
``$XDG_DATA_HOME/da3-edge/models`` (``~/.local/share/da3-edge/models``).

Size and SHA-256 are checked every time an artifact is opened (~0.1 s per 50 MB
here); a truncated or modified file is refused with a one-line error.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from edge import atomic
from edge.errors import ManifestError, ModelCorrupt, ModelNotFound, WeightsError

MANIFEST = "manifest.json"
FORMAT = 1
ENV_MODELS = "DA3_EDGE_MODELS"
PRECISIONS = ("fp32", "fp16", "int8")
PATCH = 14
LONGEST_SIDE = 504  # DA3's own processing size: the default size
# The ExecuTorch stage programs (edge.stages.executorch): DA3's preprocessing in two
# steps, in one (where its second is the identity), and the postprocess.
STAGE_KINDS = ("pre", "pre1", "post")
# A size is the core's long side, a multiple of PATCH: from 4 patches to twice DA3's.
MIN_SIZE, MAX_SIZE = 4 * PATCH, 2 * LONGEST_SIDE
# The aspect ratios exported at each size (H:W): photos and video, either way up.
ASPECTS = ((3, 4), (4, 3), (9, 16), (16, 9))


# The release DA3 publishes (the folder PyTorchModelHubMixin writes).
MODEL_NAME = "da3-small"
HUB_REPO = "depth-anything/da3-small"
PREFIX = "model."
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def resolve_weights_file(path: str | os.PathLike[str]) -> Path:
    """The ``model.safetensors`` for a file or release-folder argument; a folder whose
    ``config.json`` names another model is refused."""
    path = Path(path)
    if path.is_dir():
        config = path / CONFIG_FILE
        if config.is_file():
            try:
                name = json.loads(config.read_text(encoding="utf-8")).get("model_name")
            except (OSError, ValueError, AttributeError) as exc:
                raise WeightsError(f"{config}: unreadable release config ({exc})") from None
            if name not in (None, MODEL_NAME):
                raise WeightsError(f"{config}: model_name is {name!r}, expected {MODEL_NAME!r}")
        path = path / WEIGHTS_FILE
    if not path.is_file():
        raise ModelNotFound(f"no weights at {path} (expected a {WEIGHTS_FILE} or its folder)")
    return path


def default_models_dir() -> Path:
    """The per-user model directory under the XDG data home."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(data_home) / "da3-edge" / "models"


def resolve_models_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Explicit argument, then ``$DA3_EDGE_MODELS``, then the XDG default."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_MODELS)
    if env:
        return Path(env)
    return default_models_dir()


def da3_shape(height: int, width: int, longest: int = LONGEST_SIDE) -> tuple[int, int]:
    """DA3's processing size for an image (``upper_bound_resize`` in its
    ``InputProcessor``): scale so the longest side is ``longest`` (each side
    ``round()``-ed), then move each side to the nearest multiple of 14, ties going
    up. 1200x1600 -> 378x504, 720x1280 -> 280x504, 287x504 -> 294x504."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if max(height, width) != longest:
        scale = longest / max(height, width)
        height, width = max(1, round(height * scale)), max(1, round(width * scale))
    return _nearest_multiple(height), _nearest_multiple(width)


def check_size(size: int) -> int:
    """``size`` if it is a size a core can have; ValueError saying what one is."""
    if size % PATCH or not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(
            f"size {size}: the core's long side must be a multiple of {PATCH} "
            f"from {MIN_SIZE} to {MAX_SIZE} ({LONGEST_SIDE} is DA3's own)"
        )
    return size


def size_shapes(size: int) -> tuple[tuple[int, int], ...]:
    """The core shapes exported at ``size``: DA3's shape for each of ASPECTS
    (504 -> 378x504, 504x378, 280x504, 504x280; 280 -> 210x280, 280x210, 154x280, ...)."""
    return tuple(da3_shape(h, w, check_size(size)) for h, w in ASPECTS)


def size_of(shape: tuple[int, int]) -> int:
    """A core shape's size: its long side."""
    return max(shape)


def _nearest_multiple(x: int, p: int = PATCH) -> int:
    down = (x // p) * p
    up = down + p
    # DA3 allows 1 here (then fails in the patch embedding); a side is at least one patch.
    return max(p, up if up - x <= x - down else down)


DEFAULT_SHAPES = size_shapes(LONGEST_SIDE)


def parse_shape(text: str) -> tuple[int, int]:
    """``"378x504"`` -> (378, 504); both sides positive multiples of 14."""
    try:
        h_text, w_text = text.lower().split("x")
        h, w = int(h_text), int(w_text)
    except ValueError:
        raise ValueError(f"shape {text!r} is not HxW, e.g. 378x504") from None
    if h <= 0 or w <= 0 or h % PATCH or w % PATCH:
        raise ValueError(f"shape {text!r}: both sides must be positive multiples of {PATCH}")
    return h, w


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _plain_name(name: str) -> bool:
    """A file in the folder itself: no path, no way out of it."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


@dataclass
class Artifact:
    """One file of a model directory, as the manifest describes it."""

    file: str
    kind: str  # "core" for the LiteRT depth model
    shape: tuple[int, int]
    precision: str
    bytes: int
    sha256: str
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def random_init(self) -> bool:
        return bool(self.provenance.get("random_init"))

    @property
    def weights(self) -> str:
        return str(self.provenance.get("weights", "unknown"))

    @property
    def name(self) -> str:
        return f"{self.shape[0]}x{self.shape[1]} {self.precision}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape"] = list(self.shape)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Artifact:
        if isinstance(data, dict) and "file" in data and not _plain_name(str(data["file"])):
            raise ManifestError(
                f"{where}: artifact file {str(data['file'])!r} must be a plain file name in "
                "the model folder"
            )
        try:
            shape = tuple(int(v) for v in data["shape"])
            if len(shape) != 2:
                raise ValueError("shape must be [height, width]")
            return cls(
                file=str(data["file"]),
                kind=str(data.get("kind", "core")),
                shape=(shape[0], shape[1]),
                precision=str(data["precision"]),
                bytes=int(data["bytes"]),
                sha256=str(data["sha256"]),
                provenance=dict(data.get("provenance", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: bad artifact entry ({exc!r})") from None


@dataclass
class Manifest:
    """The ``manifest.json`` of one model directory."""

    directory: Path
    model: str = "da3-small"
    artifacts: list[Artifact] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.directory / MANIFEST

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Manifest:
        directory = Path(directory)
        path = directory / MANIFEST
        if not path.is_file():
            raise ModelNotFound(
                f"no model in {directory} (no {MANIFEST}); build them with "
                "`da3-edge models build --weights hub --out DIR` or point --models / "
                "$DA3_EDGE_MODELS at one"
            )
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ManifestError(f"{path}: unreadable manifest ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ManifestError(f"{path}: not a da3-edge manifest of format {FORMAT}")
        entries = data.get("artifacts")
        if not isinstance(entries, list):
            raise ManifestError(f"{path}: 'artifacts' must be a list")
        artifacts = [Artifact.from_json(e, str(path)) for e in entries]
        return cls(directory, str(data.get("model", "da3-small")), artifacts)

    @classmethod
    def load_or_new(cls, directory: str | os.PathLike[str]) -> Manifest:
        directory = Path(directory)
        if (directory / MANIFEST).exists():
            return cls.load(directory)
        return cls(directory)

    def save(self) -> None:
        data = {
            "format": FORMAT,
            "model": self.model,
            "artifacts": [a.to_json() for a in sorted(self.artifacts, key=_order)],
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(self.path, (json.dumps(data, indent=2) + "\n").encode())

    def upsert(self, artifact: Artifact) -> None:
        self.artifacts = [a for a in self.artifacts if a.file != artifact.file]
        self.artifacts.append(artifact)

    def find(self, shape: tuple[int, int], precision: str) -> Artifact:
        for artifact in self.artifacts:
            if (
                artifact.kind == "core"
                and artifact.shape == shape
                and artifact.precision == precision
            ):
                return artifact
        have = ", ".join(a.name for a in self.cores()) or "none"
        raise ModelNotFound(
            f"{self.directory}: no {precision} model for {shape[0]}x{shape[1]} (have: {have})"
        )

    def find_stage(self, kind: str, shape: tuple[int, int]) -> Artifact:
        """The ExecuTorch ``pre``, ``pre1`` or ``post`` program for a core shape."""
        for artifact in self.artifacts:
            if artifact.kind == kind and artifact.shape == shape:
                return artifact
        raise ModelNotFound(
            f"{self.directory}: no ExecuTorch {kind} program for {shape[0]}x{shape[1]}; "
            "`da3-edge models build` (without --no-stages) writes them"
        )

    def stage_programs(self) -> list[Artifact]:
        return sorted((a for a in self.artifacts if a.kind in STAGE_KINDS), key=_order)

    def cores(self) -> list[Artifact]:
        return sorted((a for a in self.artifacts if a.kind == "core"), key=_order)

    def sizes(self, precision: str | None = None) -> list[int]:
        """The sizes (long sides) of the cores there are (of ``precision``, if given)."""
        return sorted({size_of(a.shape) for a in self.cores() if precision in (None, a.precision)})

    def artifact_path(self, artifact: Artifact) -> Path:
        return self.directory / artifact.file

    def verify(self, artifact: Artifact, *, full: bool = False) -> Path:
        """Check size and SHA-256 of an artifact; return its path or raise.

        A full hash reads the whole file (~0.1 s per 50 MB here, more on an SD card).
        After one succeeds, a stamp of the file's identity (size, mtime, ctime, inode,
        device) and the hash is kept in the user's cache; while the file still has that
        identity, later opens skip the re-read. Any write to the file, or a chmod or
        rename over it, changes its ctime, so the next open hashes it again.
        ``full=True`` (``da3-edge models --verify``) always hashes.
        """
        path = self.artifact_path(artifact)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise ModelNotFound(f"{path}: listed in {MANIFEST} but missing") from None
        if st.st_size != artifact.bytes:
            raise ModelCorrupt(
                f"{path}: {st.st_size} bytes, manifest says {artifact.bytes} (truncated or "
                "replaced; export it again)"
            )
        stamp = [*file_identity(st), artifact.sha256]
        key = str(path.resolve())
        stamps = _Stamps.load()
        if not full and stamps.data.get(key) == stamp:
            return path
        digest = sha256_file(path)
        if digest != artifact.sha256:
            raise ModelCorrupt(
                f"{path}: SHA-256 {digest[:12]}... does not match the manifest "
                f"({artifact.sha256[:12]}...); the file was modified, export it again"
            )
        stamps.remember(key, stamp)
        return path


def check_same_weights(manifest: Manifest, provenance: str) -> None:
    """A model folder holds one set of weights: refuse another's (``provenance``)."""
    others = {a.weights for a in manifest.cores()} - {provenance}
    if others:
        raise ManifestError(
            f"{manifest.directory} already holds models from other weights "
            f"({', '.join(sorted(others))}); write into another --out directory"
        )


def file_identity(st: os.stat_result) -> list[int]:
    """A file's identity as a stamp: size, mtime, ctime, inode, device. Any write, chmod
    or rename over the file changes its ctime; a copy elsewhere changes inode or device.
    Verified model files (``Manifest.verify``) and weight-cache files (``weightcache``)
    are trusted while they keep it."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def cache_dir() -> Path:
    """``$DA3_EDGE_CACHE``, else systemd's ``$CACHE_DIRECTORY``, else the XDG cache."""
    for env in ("DA3_EDGE_CACHE", "CACHE_DIRECTORY"):
        value = os.environ.get(env)
        if value:
            return Path(value.split(":")[0])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "da3-edge"


class _Stamps:
    """The verified-file stamps: kept in memory for the life of the process, and in a
    small JSON file across processes. A file that cannot be read or written (a
    service user without a home, say) only costs a re-hash in the *next* process; in
    this one, a model checked once is not hashed again while it keeps its identity
    (the daemon checks its models at start and again as it opens them)."""

    _by_path: ClassVar[dict[Path, _Stamps]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def load(cls) -> _Stamps:
        path = cache_dir() / "verified.json"
        with cls._lock:
            if path not in cls._by_path:
                try:
                    data = json.loads(path.read_text())
                    if not isinstance(data, dict):
                        data = {}
                except (OSError, ValueError):
                    data = {}
                cls._by_path[path] = cls(path, data)
            return cls._by_path[path]

    def remember(self, key: str, stamp: list[Any]) -> None:
        with self._lock:
            self.data[key] = stamp
            text = json.dumps(self.data)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(self.path, text.encode(), durable=False)
        except OSError:
            pass


def _order(a: Artifact) -> tuple[str, int, int, int]:
    rank = PRECISIONS.index(a.precision) if a.precision in PRECISIONS else len(PRECISIONS)
    return (a.kind, a.shape[0], a.shape[1], rank)
