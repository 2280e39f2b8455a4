#!/usr/bin/env python3
"""Open one .tflite model with ai_edge_litert directly, bypassing da3-edge's checks.

    python3 -m scripts.arm.litert_load MODEL.tflite

The aarch64 lane runs it on an emulated Cortex-A72 to show that the CPU check in
edge/platform.py (litert_blocker) guards against a real crash, not a guess: on a CPU
without LSE atomics LiteRT kills the process with SIGILL.
"""

import sys

from ai_edge_litert.compiled_model import CompiledModel
from ai_edge_litert.hardware_accelerator import HardwareAccelerator
from ai_edge_litert.options import CpuOptions, Options

options = Options(
    hardware_accelerators=HardwareAccelerator.CPU, cpu_options=CpuOptions(num_threads=1)
)
CompiledModel.from_file(sys.argv[1], options=options)
print("loaded")
