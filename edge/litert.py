"""The one place LiteRT is set up: whether it can run on this CPU, compiling a model
for XNNPACK, its version, and the line of its native output worth showing.

Both ``edge.core.Core`` and the weight cache's builder (``edge.weightcache``, in a
child process of its own) compile through here, so this module imports neither of
them. ``ai_edge_litert`` is imported inside the functions, not when this module is.
"""

from __future__ import annotations

import os
from typing import Any

from edge import platform, trace
from edge.errors import EdgeError


def native_error(text: str) -> str:
    """The most telling line of LiteRT's own output, for an error message."""
    lines = [ln.strip() for ln in text.splitlines() if "ERROR" in ln and "plugin" not in ln.lower()]
    return lines[-1] if lines else ""


def require_litert_cpu() -> None:
    """``EdgeError`` when LiteRT would kill the process on this CPU (platform.litert_blocker)."""
    blocker = platform.litert_blocker()
    if blocker:
        raise EdgeError(f"cannot run LiteRT here: {blocker}")


def compile_model(path: str, threads: int, flags: int | None, weight_cache: str = "") -> Any:
    """LiteRT's CompiledModel of ``path`` on the CPU (XNNPACK, ``threads``, ``flags``;
    ``weight_cache``: XNNPACK's packed-weight file, "" for none), in an environment of
    its own (``model.environment``: close it after the model; it is closed here if the
    compile fails). ``Core`` and the weight cache's builder (``weightcache._child``)
    both compile here, so the cache is built for the kernels that map it."""
    import ai_edge_litert
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.environment import Environment, EnvironmentOptions
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import CpuOptions, Options

    cpu = CpuOptions(
        num_threads=threads, xnnpack_flags=flags, xnnpack_weight_cache_path=weight_cache
    )
    options = Options(hardware_accelerators=HardwareAccelerator.CPU, cpu_options=cpu)
    runtime = os.path.dirname(os.path.abspath(ai_edge_litert.__file__))
    environment = Environment.create(options=EnvironmentOptions(runtime_path=runtime))
    trace.mark("core: environment")
    try:
        return CompiledModel.from_file(path, options=options, environment=environment)
    except BaseException:
        environment.close()
        raise


def version() -> str:
    """ai_edge_litert's version (the module's own attribute: importlib.metadata scans
    sys.path, ~10 ms a start)."""
    import ai_edge_litert

    return str(getattr(ai_edge_litert, "__version__", "unknown"))
