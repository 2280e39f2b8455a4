"""Export: torch-side code that turns DA3-small weights into LiteRT artifacts.

Nothing under ``edge.export`` is imported on the runtime path. It needs the export
environment (torch 2.13.0, litert-torch, depth-anything-3 and a few small modules;
``scripts/setup-export-env.sh`` installs it); ``require_export_env`` turns a missing
piece into one readable error.
"""

from __future__ import annotations

import importlib

from edge.errors import ExportEnvMissing

_NEEDED = (
    "torch",
    "litert_torch",
    "depth_anything_3",
    "safetensors",
    "einops",
    "omegaconf",
    "addict",
    "executorch",
)
INSTALL_HINT = (
    "install the export environment: scripts/setup-export-env.sh "
    "(or pip install -r requirements/export.txt && "
    "pip install --no-deps -r requirements/export-nodeps.txt)"
)


def require_export_env() -> None:
    """Import-check the export dependencies; raise ExportEnvMissing naming the first gap."""
    for name in _NEEDED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ExportEnvMissing(
                f"export needs {name!r}, which is not importable ({exc}); {INSTALL_HINT}"
            ) from None
