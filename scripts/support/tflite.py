"""A LiteRT core's float constants, read from the file itself (LiteRT's flatbuffer
schema): where each lies, its dtype and shape. The core templates cut them out
(scripts/core_templates.py); the soak changes one (scripts/support/soak)."""

from __future__ import annotations

from typing import Any

import numpy as np

FLOAT_TYPES: dict[int, np.dtype[Any]] = {
    0: np.dtype("<f4"),
    1: np.dtype("<f2"),
}  # tflite TensorType FLOAT32, FLOAT16


def spans(data: bytes) -> list[tuple[int, int, np.dtype[Any], tuple[int, ...]]]:
    """Each float constant's (file offset, size, dtype, shape)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    graph = model.Subgraphs(0)
    typed: dict[int, tuple[np.dtype[Any], tuple[int, ...]]] = {}
    for t in range(graph.TensorsLength()):
        tensor = graph.Tensors(t)
        if tensor.Type() in FLOAT_TYPES:
            shape = tuple(int(n) for n in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
            typed.setdefault(tensor.Buffer(), (FLOAT_TYPES[tensor.Type()], shape))
    found = []
    for b, (dtype, shape) in typed.items():
        buffer = model.Buffers(b)
        if buffer.Offset() > 1:
            start, size = int(buffer.Offset()), int(buffer.Size())
        elif buffer.DataLength() > 0:
            start = buffer._tab.Vector(buffer._tab.Offset(4))
            size = buffer.DataLength()
        else:
            continue
        found.append((start, size, dtype, shape))
    return sorted(found)
