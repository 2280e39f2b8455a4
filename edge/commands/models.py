"""``da3-edge models``: what a model directory holds, and whether it is intact."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from edge.commands import options
from edge.errors import EdgeError, report
from edge.models import Artifact, Manifest, resolve_models_dir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge models",
        description="List the models in a model directory; with --verify, check each "
        "file's size and SHA-256 and load each core model with LiteRT.",
    )
    options.add_models(p)
    p.add_argument("--verify", action="store_true", help="check hashes and load each model")
    return p


def check(manifest: Manifest, artifact: Artifact) -> None:
    """Size and SHA-256 in full; a core model must load in LiteRT at its shape."""
    path = manifest.verify(artifact, full=True)
    if artifact.kind == "core":
        from edge.core import Core

        with Core(path, threads=1, precision=artifact.precision) as core:
            if core.shape != artifact.shape:
                raise EdgeError(f"{path}: takes {core.shape}, manifest says {artifact.shape}")


def _line(artifact: Artifact) -> str:
    shape = f"{artifact.shape[0]}x{artifact.shape[1]}"
    if artifact.kind == "core":
        flag = "  RANDOM-INIT (not a real model)" if artifact.random_init else ""
        label = f"{shape} {artifact.precision}"
        return f"  {label:<16} {artifact.bytes / 1e6:7.1f} MB  {artifact.file}{flag}"
    label = f"{artifact.kind} {shape}"
    return f"  {label:<16} {artifact.bytes / 1e3:7.1f} kB  {artifact.file}"


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    directory = resolve_models_dir(ns.models)
    manifest = Manifest.load(directory)
    print(f"{directory} ({manifest.model})")
    failures = 0
    for artifact in [*manifest.cores(), *manifest.stage_programs()]:
        line = _line(artifact)
        if ns.verify:
            try:
                check(manifest, artifact)
            except EdgeError as exc:
                failures += 1
                print(line + "  FAILED", flush=True)
                report(exc)
                continue
            line += "  ok"
        print(line)
    return 1 if failures else 0
