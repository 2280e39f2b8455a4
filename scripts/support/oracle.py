"""The parity oracle: the reference package's own DA3-small forward, plain fp32.

Run by the parity tests in the export environment (it needs torch):

    python -m scripts.support.oracle WEIGHTS_DIR INPUTS.npz OUTPUTS.npz

It shares no code with ``edge``: it builds the network with depth_anything_3's
``create_object``, loads the release-layout safetensors itself, and runs the
network's untouched ``forward`` on each (1, 3, H, W) array in INPUTS.npz, writing
``<key>/depth`` and ``<key>/conf`` to OUTPUTS.npz.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file


def build(weights_dir: Path) -> torch.nn.Module:
    from depth_anything_3.cfg import create_object, load_config
    from depth_anything_3.registry import MODEL_REGISTRY

    config = json.loads((weights_dir / "config.json").read_text())
    net = create_object(load_config(MODEL_REGISTRY[config["model_name"]]))
    tensors = load_file(str(weights_dir / "model.safetensors"))
    state = {k.removeprefix("model."): v for k, v in tensors.items()}
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    # safetensors stores a tensor shared by several modules once; every missing name
    # must be an alias of a loaded one.
    params = dict(net.named_parameters(remove_duplicate=False))
    loaded = {params[k].data_ptr() for k in state if k in params}
    unresolved = [k for k in missing if params.get(k) is None or params[k].data_ptr() not in loaded]
    assert not unresolved, unresolved
    return net.eval()


def main(argv: list[str]) -> int:
    weights_dir, inputs, outputs = Path(argv[0]), Path(argv[1]), Path(argv[2])
    torch.set_num_threads(2)
    net = build(weights_dir)
    results: dict[str, np.ndarray] = {}
    with np.load(inputs) as data, torch.no_grad():
        for key in data.files:
            x = torch.from_numpy(data[key]).float()
            out = net(x[:, None])  # (B, S=1, 3, H, W)
            results[f"{key}/depth"] = out.depth[0, 0].numpy().astype(np.float32)
            results[f"{key}/conf"] = out.depth_conf[0, 0].numpy().astype(np.float32)
    np.savez(outputs, **results)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
