#!/usr/bin/env bash
# Create the export/reference environment: torch 2.13.0 (CPU), litert-torch, the
# depth-anything-3 reference network (--no-deps) and da3-edge itself (editable).
# Separate from the uv-managed runtime env on purpose: uv must never resolve torch.
#
#   scripts/setup-export-env.sh            # -> .venv-export
#   DA3_EDGE_EXPORT_VENV=/opt/x scripts/setup-export-env.sh
#   PYTHON=python3.12 scripts/setup-export-env.sh
#
# On Linux, torch comes from PyTorch's CPU-only index (PyPI's Linux torch pulls several
# GB of CUDA libraries even where there is no GPU); DA3_EDGE_TORCH_INDEX names another
# index, or "" for pip's own configuration (CI's, whose torch is a CPU build already).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DA3_EDGE_EXPORT_VENV:-.venv-export}"
python="${PYTHON:-python3}"
torch_index="${DA3_EDGE_TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
die() { echo "setup-export-env.sh: error: $*" >&2; exit 1; }

# First, before any download: a Python that torch 2.13.0 and litert-torch 0.10.0 have
# wheels for (docs/how-to/export-models.md: where models can be made).
command -v "$python" >/dev/null || die "$python not found: set PYTHON to a Python 3.11, 3.12 or 3.13"
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case $version in
    3.11 | 3.12 | 3.13) ;;
    *) die "$python is Python $version; the export environment needs 3.11, 3.12 or 3.13 (the pinned torch and litert-torch have wheels for those only): install one (apt install python3.11, brew install python@3.13, uv python install 3.12) and run again with PYTHON=python3.12" ;;
esac
case $(uname -s)/$(uname -m) in
    Linux/aarch64) die "litert-torch 0.10.0 has no Linux aarch64 wheels (its litert-converter): make the models on Linux x86_64 or an Apple Silicon Mac, then copy them over" ;;
esac

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, litert_torch' 2>/dev/null; then
    # Measured 2026-12-05 (Linux x86_64, Python 3.11, the CPU torch): see the docs.
    echo "setting up $venv with Python $version: about 0.6 GB to download, 2.6 GB on disk"
fi
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
if [ "$(uname -s)" = Linux ] && [ -n "$torch_index" ]; then
    "${pip[@]}" install -q torch==2.13.0 --index-url "$torch_index"
fi
"${pip[@]}" install -q -r requirements/export.txt -c requirements/export-constraints.txt
"${pip[@]}" install -q --no-deps -r requirements/export-nodeps.txt
"${pip[@]}" install -q --no-deps -e .
"$venv/bin/python" - <<'PY'
import torch, litert_torch, depth_anything_3, safetensors  # noqa: F401
print(f"export env ready: torch {torch.__version__}, litert-torch {litert_torch.__version__}")
PY
