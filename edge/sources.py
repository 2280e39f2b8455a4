"""Camera SPEC strings, parsed without a camera: what ``edge.camera.open_source`` opens
and what the config's check reads (no numpy, no camera library), so that a config is
checked where neither is installed (``da3-edge card`` on any laptop).

- ``picamera2[:INDEX]``, ``opencv[:INDEX]``: a camera number (default 0);
- ``replay:PATH[@FPS][:once]``: images or a video at FPS (default 5), looping unless
  ``:once``;
- ``fake[:SCRIPT]``: synthetic frames and scripted faults (``edge.camera.fake``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edge.errors import UsageError

KINDS = "picamera2[:INDEX], opencv[:INDEX], replay:PATH[@FPS][:once] or fake[:SCRIPT]"


@dataclass(frozen=True)
class Spec:
    kind: str  # picamera2, opencv, replay or fake
    index: int = 0  # picamera2, opencv
    path: str = ""  # replay
    fps: float = 5.0  # replay
    loop: bool = True  # replay
    script: str = ""  # fake (checked: parse_script reads it)


def parse(spec: str) -> Spec:
    """SPEC as a Spec; UsageError, in one line, for one no source would take."""
    kind, _, rest = spec.partition(":")
    if kind == "fake":
        parse_script(rest)
        return Spec(kind, script=rest)
    if kind == "replay":
        if not rest:
            raise UsageError("replay needs a path: replay:PATH[@FPS][:once]")
        once = rest.endswith(":once")
        if once:
            rest = rest[: -len(":once")]
        path, _, fps_text = rest.rpartition("@") if "@" in rest else (rest, "", "")
        try:
            fps = float(fps_text) if fps_text else 5.0
        except ValueError:
            raise UsageError(f"replay fps {fps_text!r} is not a number") from None
        if not 0 < fps < math.inf:  # nan fails this too
            raise UsageError("replay fps must be a positive number")
        return Spec(kind, path=path, fps=fps, loop=not once)
    if kind in ("opencv", "picamera2"):
        return Spec(kind, index=_index(kind, rest))
    raise UsageError(f"unknown source {spec!r} (use {KINDS})")


def _index(kind: str, text: str) -> int:
    """The camera number after ``KIND:`` (0 when none), or UsageError."""
    if not text:
        return 0
    if not text.isdigit():
        raise UsageError(f"{kind} camera index {text!r} is not a number (0, 1, ...)")
    return int(text)


STEPS = ("ok", "error", "timeout", "hang", "freeze", "openfail", "fps", "end", "crash", "wedge")


@dataclass
class Step:
    kind: str
    count: int = 1
    value: float = 0.0


def parse_script(script: str) -> list[Step]:
    steps: list[Step] = []
    for raw in filter(None, (part.strip() for part in script.split(","))):
        kind, _, arg = raw.partition(":")
        count = 1
        if "*" in kind:
            kind, _, n = kind.partition("*")
            try:
                count = int(n)
            except ValueError:
                raise UsageError(f"fake script step {raw!r}: {n!r} is not a count") from None
            if count < 1:
                raise UsageError(f"fake script step {raw!r}: count must be at least 1")
        if kind not in STEPS:
            raise UsageError(f"fake script step {raw!r}: unknown step (use {', '.join(STEPS)})")
        value = 0.0
        if kind in ("hang", "fps"):
            try:
                value = float(arg)
            except ValueError:
                raise UsageError(
                    f"fake script step {raw!r} needs a number, e.g. {kind}:5"
                ) from None
            if not 0 < value < math.inf:  # nan fails this too
                raise UsageError(f"fake script step {raw!r}: must be a positive number")
        elif arg:
            raise UsageError(f"fake script step {raw!r}: takes no ':' argument")
        steps.append(Step(kind, count, value))
    return steps
