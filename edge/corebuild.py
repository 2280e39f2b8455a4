"""LiteRT cores made from a DA3-small release with numpy alone: ``da3-edge models build``.

A core's graph depends on its input shape, never on the weights: the weights are its
float constants. So the wheel carries, per shape and precision, a *template*: the
exported ``.tflite`` with every weight-bearing byte span cut out, and for each span a
recipe saying which release tensor fills it (transposed, sliced, cast to fp16) or which
computation of the release (the position embedding resampled to the patch grid, a
LayerNorm folded into the linear after it: ``edge.release``). A
build streams the release one tensor at a time into those spans, so what it writes is
byte for byte the file ``da3-edge export`` converts from the same weights, with no
torch, no converter and no network; ``scripts/core_templates.py`` makes the templates
from an export and checks that a build from the same weights gives the same bytes.

Template file (xz): ``MAGIC``, a 4-byte little-endian header length, a JSON header
(shape, precision, the built file's size, the release tensors it reads with their
shapes, the spans and their recipes, what made it), then the skeleton: the file's bytes
outside the spans, in order.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from edge import atomic
from edge.errors import EdgeError, ModelNotFound, OutputError, WeightsError
from edge.graphs import available, describe, template_name, templates_dir
from edge.models import STAGE_KINDS, Artifact, Manifest, check_same_weights, sha256_file
from edge.release import MODEL_NAME, PREFIX, Release, fold_bias, fold_weight, resample_pos_embed
from edge.version import version

MAGIC = b"DA3CORE\x01"
FORMAT = 1
POS_EMBED = PREFIX + "backbone.pretrained.pos_embed"
CHUNK = 1 << 20

Recipe = dict[str, Any]


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


Progress = Callable[[str], None]


def artifact_name(shape: tuple[int, int], precision: str) -> str:
    """A core's file name, as ``da3-edge export`` names it."""
    return f"{MODEL_NAME}_{shape[0]}x{shape[1]}_{precision}.tflite"


def stage_name(kind: str, shape: tuple[int, int]) -> str:
    return f"{MODEL_NAME}_{kind}_{shape[0]}x{shape[1]}.pte"


@dataclass(frozen=True)
class Template:
    """What a template's header says; ``path`` is where its bytes are."""

    path: Path
    shape: tuple[int, int]
    precision: str
    size: int  # bytes of the built core
    tensors: dict[str, tuple[int, ...]]  # release tensors read, and their shapes
    regions: list[tuple[int, int, Recipe]]  # (offset, size, recipe), by offset
    made_with: dict[str, str]

    @classmethod
    def read(cls, path: Path) -> Template:
        with _open(path) as fh:
            header = _read_header(fh, path)
        return cls(
            path=path,
            shape=(int(header["shape"][0]), int(header["shape"][1])),
            precision=str(header["precision"]),
            size=int(header["size"]),
            tensors={k: tuple(v) for k, v in header["tensors"].items()},
            regions=[(int(o), int(n), dict(r)) for o, n, r in header["regions"]],
            made_with=dict(header.get("made_with", {})),
        )


def _open(path: Path) -> IO[bytes]:
    """A template's bytes (xz). Python's lzma is optional when Python is built from source
    (pyenv without liblzma's headers): say so rather than fail on an import."""
    try:
        import lzma
    except ImportError:
        raise EdgeError(
            "this Python has no lzma module (built without liblzma): `models build` reads "
            "xz files; use a Python built with it (Debian's, python.org's, uv's)"
        ) from None
    return lzma.open(path, "rb")


def _read_header(fh: IO[bytes], path: Path) -> dict[str, Any]:
    if fh.read(len(MAGIC)) != MAGIC:
        raise EdgeError(f"{path}: not a da3-edge core template")
    (length,) = struct.unpack("<I", fh.read(4))
    header: dict[str, Any] = json.loads(fh.read(length))
    if header.get("format") != FORMAT:
        raise EdgeError(
            f"{path}: template format {header.get('format')}, this build reads {FORMAT}"
        )
    return header


def find(shape: tuple[int, int], precision: str, folder: Path | None = None) -> Template:
    path = (folder or templates_dir()) / template_name(shape, precision)
    if not path.is_file():
        offered = describe({s for s, p in available(folder) if p == precision})
        raise ModelNotFound(
            f"no {precision} graph for {shape[0]}x{shape[1]} in this da3-edge "
            f"(it builds {precision} at {offered or 'no shape'}); "
            "other shapes come from `da3-edge export` (the export environment)"
        )
    return Template.read(path)


# -- recipes -----------------------------------------------------------------------


def apply(recipe: Recipe, tensor: np.ndarray) -> np.ndarray:
    """A recipe on the release tensor it names: take, transpose, cast."""
    take = recipe.get("take")
    if take is not None:
        tensor = np.take(tensor, [int(take[1])], axis=int(take[0]))
    perm = recipe.get("perm")
    if perm is not None:
        tensor = tensor.transpose(perm)
    return np.ascontiguousarray(tensor, dtype=np.dtype(recipe["dtype"]))


def _block(i: int, part: str) -> str:
    return f"{PREFIX}backbone.pretrained.blocks.{i}.{part}"


FOLDS = {"qkv": ("attn.qkv", "norm1"), "fc1": ("mlp.fc1", "norm2")}  # linear, its norm


def inputs(recipe: Recipe) -> list[str]:
    """The release tensors a recipe reads."""
    compute = recipe.get("compute")
    if compute == "pos_embed":
        return [POS_EMBED]
    if compute == "fold":
        linear, norm = FOLDS[recipe["linear"]]
        i = int(recipe["block"])
        return [_block(i, f"{linear}.{p}") for p in ("weight", "bias")] + [
            _block(i, f"{norm}.{p}") for p in ("weight", "bias")
        ]
    if compute is not None:
        raise EdgeError(f"unknown recipe {compute!r}; a newer da3-edge made this template")
    return [recipe["tensor"]]


def region_bytes(recipe: Recipe, release: Release, template: Template) -> bytes:
    """The bytes of one span, from the release."""
    compute = recipe.get("compute")
    names = inputs(recipe)
    if compute == "fold" and recipe["part"] == "b":
        key = f"fold_bias {names[0]}"
        if key not in release.derived:
            weight, bias, _, beta = (release.get(n, template.tensors[n]) for n in names)
            release.derived[key] = fold_bias(weight, bias, beta)
        value = release.derived[key]
    else:
        arrays = [release.get(name, template.tensors[name]) for name in names]
        if compute == "pos_embed":
            value = resample_pos_embed(arrays[0], *template.shape)
        elif compute == "fold":
            value = fold_weight(arrays[0], arrays[2])
        else:
            value = arrays[0]
    plain = {k: v for k, v in recipe.items() if k in ("take", "perm", "dtype")}
    return apply(plain, value).tobytes()


def fill(template: Template, release: Release, out: Writer) -> None:
    """Write the core: the skeleton's bytes with each span filled from ``release``."""
    with _open(template.path) as skeleton:
        _read_header(skeleton, template.path)
        pos = 0
        for offset, size, recipe in template.regions:
            _copy(skeleton, out, offset - pos, template.path)
            data = region_bytes(recipe, release, template)
            if len(data) != size:
                raise WeightsError(
                    f"{release.path}: {recipe.get('tensor', recipe.get('compute'))} gives "
                    f"{len(data)} bytes where the graph holds {size}"
                )
            out.write(data)
            pos = offset + size
        _copy(skeleton, out, template.size - pos, template.path)
        if skeleton.read(1):
            raise EdgeError(f"{template.path}: longer than its header says (a damaged template)")


def _copy(src: IO[bytes], dst: Writer, n: int, path: Path) -> None:
    while n > 0:
        chunk = src.read(min(n, CHUNK))
        if not chunk:
            raise EdgeError(f"{path}: shorter than its header says (a damaged template)")
        dst.write(chunk)
        n -= len(chunk)


# -- building a model directory ----------------------------------------------------


@dataclass(frozen=True)
class Built:
    path: Path
    sha256: str
    seconds: float


def build_core(template: Template, release: Release, target: Path) -> Built:
    """One core at ``target``, written to a temporary name, synced, then renamed: a
    failure (a bad tensor, a full disk) leaves nothing at ``target`` and no partial."""
    start = time.monotonic()
    tmp = target.with_name(f".{target.name}.build")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as raw:
            fill(template, release, _Hashing(raw, digest))
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write the core ({exc.strerror or exc})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Built(target, digest.hexdigest(), time.monotonic() - start)


class _Hashing:
    """A writer that hashes what passes through it."""

    def __init__(self, raw: Writer, digest: Any) -> None:
        self.raw, self.digest = raw, digest

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.raw.write(data)


def check_release(release: Release, templates: list[Template], say: Progress) -> None:
    """Every tensor the templates read, read once before anything is written: present,
    of the network's shape, a float dtype, finite (one line naming the first that is
    not)."""
    wanted: dict[str, tuple[int, ...]] = {}
    for template in templates:
        wanted.update(template.tensors)
    for name, shape in sorted(wanted.items()):
        release.get(name, shape)
    say(f"weights: {len(wanted)} tensors read and checked")


def stage_program(kind: str) -> Path:
    """The shipped ExecuTorch stage program ``kind``: weight-free, the same for every
    core shape (its sizes come as inputs)."""
    return Path(str(resources.files("edge") / "data" / "stages" / f"{kind}.pte"))


def build_models(
    weights: Path,
    out: Path,
    shapes: list[tuple[int, int]],
    precisions: list[str],
    *,
    with_stages: bool = True,
    progress: Progress,
) -> list[Artifact]:
    """The cores (and the stage programs) for ``shapes`` x ``precisions`` in ``out``,
    recorded in its manifest. Everything is checked before the first byte is written:
    the templates exist, the release is whole and finite, ``out`` holds no other
    weights' models."""
    templates = [find(shape, p) for shape in shapes for p in precisions]
    with Release(weights) as release:
        seed = release.random_seed()
        for template in templates:  # names, shapes and dtypes first: the header alone
            for name, shape in template.tensors.items():
                release.info(name, shape)
        progress(f"weights: {release.path} ({release.path.stat().st_size / 1e6:.0f} MB)")
        provenance = f"sha256:{sha256_file(release.path)}"
        manifest = Manifest.load_or_new(out)
        check_same_weights(manifest, provenance)
        check_release(release, templates, progress)
        out.mkdir(parents=True, exist_ok=True)
        made = []
        for n, template in enumerate(templates, 1):
            name = artifact_name(template.shape, template.precision)
            built = build_core(template, release, out / name)
            artifact = Artifact(
                file=name,
                kind="core",
                shape=template.shape,
                precision=template.precision,
                bytes=built.path.stat().st_size,
                sha256=built.sha256,
                provenance=_provenance(provenance, seed, release.path, template),
            )
            if not _recorded(manifest, artifact):
                manifest.upsert(artifact)
                manifest.save()
            made.append(artifact)
            progress(
                f"[{n}/{len(templates)}] {template.shape[0]}x{template.shape[1]} "
                f"{template.precision}: {artifact.bytes / 1e6:.1f} MB in {built.seconds:.1f} s"
                + ("  RANDOM-INIT (not a real model)" if seed is not None else "")
            )
    if with_stages:
        made += _install_stages(out, manifest, shapes, progress)
    return made


def _recorded(manifest: Manifest, artifact: Artifact) -> bool:
    """The manifest has this core already, the same bytes from the same weights: its
    entry stays as it is (its date too), so a build run again changes no file."""
    return any(
        a.file == artifact.file and a.sha256 == artifact.sha256 and a.weights == artifact.weights
        for a in manifest.cores()
    )


def _provenance(weights: str, seed: str | None, source: Path, template: Template) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "weights": weights,
        "random_init": seed is not None,
        "source": str(source),
        "built_by": f"da3-edge {version()} models build",
        "graph": {k: template.made_with.get(k, "unknown") for k in ("commit", "litert-torch")},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _install_stages(
    out: Path, manifest: Manifest, shapes: list[tuple[int, int]], progress: Progress
) -> list[Artifact]:
    """The shipped stage programs under each shape's name, as the export names them."""
    made = []
    for kind in STAGE_KINDS:
        data = stage_program(kind).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        for shape in shapes:
            name = stage_name(kind, shape)
            try:
                atomic.write_bytes(out / name, data)
            except OSError as exc:
                raise OutputError(f"{out / name}: cannot write ({exc.strerror or exc})") from None
            provenance = {"model": MODEL_NAME, "weights": "none", "random_init": False}
            artifact = Artifact(
                file=name,
                kind=kind,
                shape=shape,
                precision="fp32",
                bytes=len(data),
                sha256=digest,
                provenance=dict(provenance, built_by="da3-edge models build"),
            )
            manifest.upsert(artifact)
            made.append(artifact)
    manifest.save()
    progress(f"stage programs: {', '.join(STAGE_KINDS)} for {len(shapes)} shapes")
    return made
