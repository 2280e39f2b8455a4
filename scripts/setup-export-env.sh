#!/usr/bin/env bash
# Create the export/reference environment: torch 2.13.0 (CPU), litert-torch, the
# depth-anything-3 reference network (--no-deps) and da3-edge itself (editable).
# Separate from the uv-managed runtime env on purpose: uv must never resolve torch.
#
#   scripts/setup-export-env.sh            # -> .venv-export
#   DA3_EDGE_EXPORT_VENV=/opt/x scripts/setup-export-env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DA3_EDGE_EXPORT_VENV:-.venv-export}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q -r requirements/export.txt -c requirements/export-constraints.txt
"${pip[@]}" install -q --no-deps -r requirements/export-nodeps.txt
"${pip[@]}" install -q --no-deps -e .
"$venv/bin/python" - <<'PY'
import torch, litert_torch, depth_anything_3, safetensors  # noqa: F401
print(f"export env ready: torch {torch.__version__}, litert-torch {litert_torch.__version__}")
PY
