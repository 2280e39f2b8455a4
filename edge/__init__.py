"""da3-edge: Depth Anything 3 (small) on Arm edge devices.

Importing ``edge`` does no work: no device probing, no LiteRT or torch import. The
heavy parts load when used: ``edge.core.Core`` (LiteRT), ``edge.export`` (torch).
Outputs are *relative* depth (larger = farther, arbitrary scale), never metres.
"""

from __future__ import annotations

from edge.errors import (
    CameraError,
    CameraTimeout,
    CameraWedged,
    CardError,
    ConfigError,
    DeployError,
    EdgeError,
    ExportEnvMissing,
    ImageError,
    InputUnreadable,
    ManifestError,
    ModelCorrupt,
    ModelNotFound,
    NoFieldOfView,
    OutputError,
    PackError,
    ShapeError,
    StagesUnavailable,
    UnsafeStore,
    UsageError,
    WeightsError,
)


def __getattr__(name: str) -> str:
    """``edge.__version__``, looked up when first asked for (edge.version)."""
    if name == "__version__":
        from edge.version import version

        return version()
    raise AttributeError(f"module 'edge' has no attribute {name!r}")


__all__ = [
    "CameraError",
    "CameraTimeout",
    "CameraWedged",
    "CardError",
    "ConfigError",
    "DeployError",
    "EdgeError",
    "ExportEnvMissing",
    "ImageError",
    "InputUnreadable",
    "ManifestError",
    "ModelCorrupt",
    "ModelNotFound",
    "NoFieldOfView",
    "OutputError",
    "PackError",
    "ShapeError",
    "StagesUnavailable",
    "UnsafeStore",
    "UsageError",
    "WeightsError",
    "__version__",
]
