"""The aarch64 lane's kernel counter, end to end on a program whose calls are known.

scripts/arm/kcount.c (a qemu TCG plugin) counts the blocks an aarch64 program runs
between two markers; scripts/support/kernels.py names them from the guest's maps and the
ELF symbols. Here a small aarch64 program calls ``work`` once before the markers and
exactly five times between them, under Debian's dynamic qemu-aarch64 with the plugin:
the report must say 5 calls and the loop's instructions, and nothing from before.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from scripts.support import ROOT
from scripts.support import kernels as k
from scripts.support.tools import require_tool

PROGRAM = r"""
#include <stdio.h>
#include <unistd.h>
volatile int g;
__attribute__((noinline)) int work(int n) { int s = g; for (int i = 0; i < n; i++) s += i * i; return s; }
__attribute__((noinline)) int before(int n) { return work(n) + 1; }
int main(int argc, char **argv) {
    int r = before(10);
    lseek(-1, 0, 0x6b63);            /* reset */
    for (int k = 0; k < 5; k++) r += work(1000);
    lseek(-1, 1, 0x6b63);            /* segment 1 */
    FILE *in = fopen("/proc/self/maps", "r"), *out = fopen(argv[1], "w");
    int c;
    while ((c = fgetc(in)) != EOF) fputc(c, out);
    fclose(out);
    return r == 0;
}
"""


def test_the_plugin_counts_calls_between_the_markers(tmp_path: Path) -> None:
    for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc", "gcc"):
        require_tool(tool, ".ci/run installs requirements/apt.txt")
    plugin = tmp_path / "kcount.so"
    flags = ["-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"]
    subprocess.run(
        ["gcc", *flags, "-o", str(plugin), str(ROOT / "scripts/arm/kcount.c")], check=True
    )
    (tmp_path / "t.c").write_text(PROGRAM)
    program = tmp_path / "t"
    subprocess.run(
        ["aarch64-linux-gnu-gcc", "-O1", "-static", "-o", str(program), str(tmp_path / "t.c")],
        check=True,
    )
    counts = tmp_path / "counts.txt"
    options = ["-cpu", "cortex-a76", "-plugin", f"{plugin},out={counts}"]
    subprocess.run(
        ["qemu-aarch64", *options, str(program), str(tmp_path / "maps.txt")], check=True, timeout=60
    )
    (tmp_path / "segments.json").write_text('{"1": {"config": "work"}}')
    data = k.report(tmp_path, Path("/"), also=r"^(work|before)$")
    functions = data["work"]["kernels"]
    print({name: (f["calls"], f["instructions"]) for name, f in functions.items()})
    assert functions["work"]["calls"] == 5
    # The loop body is a few instructions a turn, 5 x 1000 turns.
    assert 5 * 1000 * 3 <= functions["work"]["instructions"] <= 5 * 1000 * 10
    assert "before" not in functions  # it ran before the reset
    assert data["work"]["by_library"]["t"] >= functions["work"]["instructions"]


def test_check_wants_kleidiai_for_int8_and_each_precisions_gemms() -> None:

    def seg(*names: str, **facts: object) -> dict[str, object]:
        return {
            "instructions": 100,
            "kernels": {n: {"kind": k.kind_of(n), "calls": 1, "instructions": 10} for n in names},
            **facts,
        }

    good = {
        "int8": seg("kai_run_matmul_clamp_f32_qai8dxp4x4_qsi8cxp4x4_16x4_neon_dotprod"),
        "fp16": seg("xnn_f16_gemm_minmax_ukernel_6x16__asm", fp16_arithmetic=True),
        "fp32": seg("xnn_f32_igemm_minmax_ukernel_6x8__asm"),
    }
    assert k.check(good) == 0
    assert k.check({**good, "int8": seg("xnn_qd8_f32_qc8w_gemm_minmax_ukernel_4x16c4")}) == 1
    assert k.check({**good, "fp16": seg("xnn_f32_gemm_minmax_ukernel_6x8")}) == 1
    assert k.check({**good, "fp16": {**good["fp16"], "fp16_arithmetic": False}}) == 1
    assert k.check({"fp32": good["fp32"]}) == 1  # no int8 run: nothing was shown
    assert k.family("xnn_f32_gemm_minmax_ukernel_6x8__asm_aarch64_neonfma") == (
        "xnn_f32_gemm_minmax__asm_aarch64_neonfma"
    )


def test_the_committed_measurement_passes_the_check() -> None:
    """The run docs/arm.md's kernel table renders (docs/bench/kernels-a76.json, the
    full-size run; tests/test_docs.py checks the table is current) shows int8 on
    KleidiAI."""
    data = json.loads((ROOT / "docs/bench/kernels-a76.json").read_text())
    assert k.check(data) == 0
    assert data["fp16"]["fp16_arithmetic"] and not data["fp16-off"]["fp16_arithmetic"]
    assert data["int8"]["shape"] == [280, 504]
    # docs/arm.md says the pre run is the one-step program: a frame twice 280x504's size.
    assert data["stages-pre"]["program"] == "pre1" and data["stages-pre"]["input"] == [560, 1008]


def test_the_committed_size_counts_are_fp16_forwards_at_each_size() -> None:
    """docs/performance.md's A76 size table (docs/bench/kernels-a76-sizes.json): one warm
    fp16-arithmetic forward per size, most of it in XNNPACK's fp16 GEMMs, the count
    falling with the size."""
    data = json.loads((ROOT / "docs/bench/kernels-a76-sizes.json").read_text())
    runs = {label: v for label, v in data.items() if not label.startswith("_")}
    assert sorted(runs) == ["fp16@210x280", "fp16@294x392", "fp16@378x504"]
    for label, v in runs.items():
        assert v["warm"] and v["fp16_arithmetic"] and label.endswith("x".join(map(str, v["shape"])))
        f16_gemm = sum(
            f["instructions"]
            for name, f in v["kernels"].items()
            if k.family(name).startswith(("xnn_f16_gemm", "xnn_f16_igemm"))
        )
        assert f16_gemm > 0.8 * v["instructions"], (label, f16_gemm / v["instructions"])
    counts = [runs[f"fp16@{s}"]["instructions"] for s in ("378x504", "294x392", "210x280")]
    assert counts == sorted(counts, reverse=True)
