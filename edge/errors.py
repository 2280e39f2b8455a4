"""One root exception; each leaf also inherits the built-in it behaves like.

Every error type of the package lives here, so ``edge.errors`` and ``edge`` name them
all (tests/test_errors.py checks). Library code raises these; only the CLI
turns them into one-line messages, through :func:`report`.
"""

from __future__ import annotations

import sys


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (native libraries write whole reports),
    or its type name when it has none: what goes inside a one-line error."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def printable(text: str) -> str:
    """Words from elsewhere (a server's reason phrase, a store's status.json) made safe
    for a terminal: control characters (escapes) as '?'."""
    return "".join(c if c.isprintable() else "?" for c in text)


class EdgeError(Exception):
    """Root of every error da3-edge raises on purpose."""


class ModelNotFound(EdgeError, FileNotFoundError):
    """No model directory, manifest, artifact or weights where one was expected."""


class ModelCorrupt(EdgeError, ValueError):
    """An artifact exists but is truncated, tampered with or unreadable."""


class ManifestError(EdgeError, ValueError):
    """A manifest.json that cannot be parsed or lacks required fields."""


class ShapeError(EdgeError, ValueError):
    """An input whose shape does not match the model it is fed to."""


class WeightsError(EdgeError, ValueError):
    """Weights that cannot be read or do not fit the DA3-small network."""


class ExportEnvMissing(EdgeError, ImportError):
    """The torch export environment is not installed."""


class UsageError(EdgeError, ValueError):
    """A bad command-line value that argparse cannot catch by itself (exit 2)."""


class ImageError(EdgeError, ValueError):
    """An input that is not a usable image: empty, corrupt, truncated, too large."""


class NoFieldOfView(EdgeError, ValueError):
    """A point cloud asked of a picture whose field of view is not known."""


class InputUnreadable(EdgeError, OSError):
    """An input path that cannot be read (missing, a directory, no permission)."""


class OutputError(EdgeError, OSError):
    """An output that cannot be written (no space, read-only, not a directory)."""


class UnsafeStore(EdgeError, PermissionError):
    """A frame store that another user could write to or point elsewhere: a symbolic
    link, owned by someone else, writable by group or others."""


class ConfigError(EdgeError, ValueError):
    """A configuration file or value that cannot be used."""


class StagesUnavailable(EdgeError, ImportError):
    """The ExecuTorch runtime is not installed."""


class PackError(EdgeError, ValueError):
    """A model pack that cannot be used: wrong SHA-256, truncated, unsafe, or its models
    do not check."""


class DeployError(EdgeError, ValueError):
    """What da3-edge deploys cannot be had (a broken install, a wheel that does not
    build), or a wheel ``da3-edge update`` refuses."""


class CardError(EdgeError, ValueError):
    """A boot partition, user-data, model folder or config ``da3-edge card`` refuses."""


class CameraError(EdgeError, OSError):
    """The camera failed: cannot open, lost, or returned garbage. Reopen and retry."""


class CameraTimeout(CameraError, TimeoutError):
    """No frame within the timeout."""


class CameraWedged(EdgeError, RuntimeError):
    """A camera that did not close: a driver call is stuck, and only a new process gets
    the camera back (the daemon exits; systemd starts it again)."""


def report(message: object) -> None:
    """The one-line error every command prints: ``da3-edge: error: MESSAGE``."""
    print(f"da3-edge: error: {message}", file=sys.stderr)
