"""The PyTorch contender: DA3-small as its own package runs it, one still in a fresh
process (run in the export environment, from the checkout)::

    python -m scripts.support.compare_pytorch.baseline WEIGHTS IMAGE OUT.png THREADS SIZE [forward]

The network built with depth_anything_3's ``create_object``, weights from the release's
safetensors, DA3's own preprocessing (its ``InputProcessor``, ``process_res`` SIZE), a plain fp32 forward
(no autocast), depth resized to the photo and written as a 16-bit PNG of normalised
inverse depth. ``forward``: then time three more forwards (the best is reported).
Prints one JSON line: the times and the network's input shape.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    import cv2
    import numpy as np
    import torch

    from scripts.support.reference_preprocess import ensure_torchvision

    ensure_torchvision()
    from depth_anything_3.cfg import create_object, load_config
    from depth_anything_3.registry import MODEL_REGISTRY
    from depth_anything_3.utils.io.input_processor import InputProcessor
    from safetensors.torch import load_file

    weights, image, out, threads, size = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    torch.set_num_threads(threads)
    net = create_object(load_config(MODEL_REGISTRY["da3-small"])).eval()
    state = {
        k.removeprefix("model."): v for k, v in load_file(f"{weights}/model.safetensors").items()
    }
    net.load_state_dict(state, strict=False)
    t_loaded = time.perf_counter()
    rgb = cv2.cvtColor(cv2.imread(image, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    processor = InputProcessor()
    x, _, _, _ = processor._process_one(
        rgb, process_res=size, process_res_method="upper_bound_resize"
    )
    with torch.no_grad():
        t1 = time.perf_counter()
        depth = net(x[None, None]).depth[0, 0].numpy()
        first = time.perf_counter() - t1
    h, w = rgb.shape[:2]
    depth = cv2.resize(depth, (w, h), interpolation=cv2.INTER_LINEAR)
    inv = 1.0 / np.maximum(depth, 1e-12)
    inv = (inv - inv.min()) / max(inv.max() - inv.min(), 1e-12)
    cv2.imwrite(out, np.round(inv * 65535).astype(np.uint16))
    t_done = time.perf_counter()
    forwards: list[float] = []
    if argv[5:] == ["forward"]:
        with torch.no_grad():
            for _ in range(3):
                t = time.perf_counter()
                net(x[None, None])
                forwards.append(time.perf_counter() - t)
    result: dict[str, Any] = {
        "total_in_process_s": t_done - t0,
        "load_s": t_loaded - t0,
        "first_forward_s": first,
        "forward_s": min(forwards) if forwards else None,
        "shape": list(x.shape),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
