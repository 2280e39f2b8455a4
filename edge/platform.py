"""What the CPU can do, and the fp16 policy that follows from it.

XNNPACK runs fp16 *arithmetic* only when asked (its FORCE_FP16 flag) and only makes
sense on CPUs with native FP16 vector arithmetic: Armv8.2-A FEAT_FP16 (the Pi 5's
Cortex-A76, every Apple Silicon Mac). Elsewhere the flag still works but is
emulated; on this kit's x86_64 test machine it made DA3 1.8x slower. So the policy
is: fp16 arithmetic on when the CPU has FP16, off otherwise, and overridable.

Nothing here runs at import time; ``cpu_features()`` reads /proc/cpuinfo (Linux) or
``sysctl`` (macOS) when called, once.
"""

from __future__ import annotations

import functools
import os
import platform as _platform
import subprocess
from dataclasses import dataclass

# XNNPACK delegate flags (tensorflow/lite/delegates/xnnpack/xnnpack_delegate.h):
# QS8 = 0x1, QU8 = 0x2 (the int8 paths), FORCE_FP16 = 0x4.
XNNPACK_FLAG_QS8 = 0x1
XNNPACK_FLAG_QU8 = 0x2
XNNPACK_FLAG_FORCE_FP16 = 0x4
XNNPACK_FLAGS_FP16 = XNNPACK_FLAG_QS8 | XNNPACK_FLAG_QU8 | XNNPACK_FLAG_FORCE_FP16
ENV_FP16 = "DA3_EDGE_FP16_ARITHMETIC"


@dataclass(frozen=True)
class CpuFeatures:
    machine: str
    model: str
    fp16: bool  # native FP16 vector arithmetic (Arm FEAT_FP16: asimdhp)
    dotprod: bool  # Arm FEAT_DotProd (asimddp)
    i8mm: bool  # Arm FEAT_I8MM
    sme: bool  # Arm SME
    cores: int
    lse: bool = False  # Arm FEAT_LSE (Armv8.1 atomics; "atomics" in /proc/cpuinfo)

    def as_dict(self) -> dict[str, object]:
        return {
            "machine": self.machine,
            "model": self.model,
            "fp16": self.fp16,
            "dotprod": self.dotprod,
            "i8mm": self.i8mm,
            "sme": self.sme,
            "lse": self.lse,
            "cores": self.cores,
        }


ARM_MACHINES = ("aarch64", "arm64")  # platform.machine() on Linux, on macOS


def parse_cpuinfo(text: str, machine: str) -> CpuFeatures:
    """Features from a Linux /proc/cpuinfo text (first processor's flags)."""
    flags: set[str] = set()
    model = ""
    part = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        value = value.strip()
        if key in ("features", "flags") and not flags:
            flags = set(value.split())
        elif key == "model name" and not model:
            model = value
        elif key == "cpu part" and not part:
            part = value
    if not model and part:
        model = _ARM_PARTS.get(part.lower(), f"Arm part {part}")
    arm = machine in ARM_MACHINES
    return CpuFeatures(
        machine=machine,
        model=model or machine,
        fp16=arm and "asimdhp" in flags,
        dotprod=arm and "asimddp" in flags,
        i8mm=arm and "i8mm" in flags,
        sme=arm and "sme" in flags,
        cores=os.cpu_count() or 1,
        lse=arm and "atomics" in flags,
    )


_ARM_PARTS = {
    "0xd03": "Cortex-A53",
    "0xd08": "Cortex-A72",
    "0xd0b": "Cortex-A76",
    "0xd0c": "Neoverse-N1",
    "0xd40": "Neoverse-V1",
    "0xd49": "Neoverse-N2",
}


def _sysctl(name: str) -> str:
    try:
        out = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


@functools.lru_cache(maxsize=1)
def cpu_features() -> CpuFeatures:
    machine = _platform.machine().lower()
    if _platform.system() == "Darwin":

        def has(name: str) -> bool:
            return _sysctl(f"hw.optional.arm.{name}") == "1"

        arm = machine == "arm64"
        return CpuFeatures(
            machine=machine,
            model=_sysctl("machdep.cpu.brand_string") or machine,
            fp16=arm and has("FEAT_FP16"),
            dotprod=arm and has("FEAT_DotProd"),
            i8mm=arm and has("FEAT_I8MM"),
            sme=arm and has("FEAT_SME"),
            cores=os.cpu_count() or 1,
            lse=arm and has("FEAT_LSE"),
        )
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    return parse_cpuinfo(text, machine)


def litert_blocker(features: CpuFeatures | None = None) -> str | None:
    """Why LiteRT cannot run on this CPU, or None.

    ai-edge-litert 2.3.0's aarch64 wheel loads a library built for Armv8.1 atomics
    (LSE) whenever a model is opened, and that library kills the process with SIGILL
    on a CPU without them ("compiled with lse enabled, but this feature is not
    available on this processor"): the Cortex-A72 of a Raspberry Pi 4, the A53 of a
    Pi 3 / Zero 2. Found by the aarch64 lane; checked first so the user gets a
    sentence instead of a dead process.
    """
    f = features or cpu_features()
    if is_arm(f) and not f.lse:
        return (
            f"this CPU ({f.model}) lacks Armv8.1 atomics (LSE), which ai-edge-litert's "
            "aarch64 build requires: LiteRT would stop the process with SIGILL. "
            "da3-edge needs a Raspberry Pi 5 (Cortex-A76) or newer"
        )
    return None


def fp16_arithmetic(
    requested: bool | None = None,
    features: CpuFeatures | None = None,
    precision: str | None = None,
) -> bool:
    """Whether to ask XNNPACK for fp16 arithmetic for a model of ``precision``.

    Never for int8: XNNPACK cannot prepare the dynamic-range int8 model with FORCE_FP16
    ("TfLiteXNNPackDelegate failed to prepare"; found by the aarch64 lane, where the
    policy is on, and reproduced on x86_64). Otherwise ``requested`` (a flag) wins, then
    ``$DA3_EDGE_FP16_ARITHMETIC`` (1/0), then the model and the CPU: on for fp16 models
    (and an unknown precision) when the CPU has native FP16 arithmetic; fp32 models stay
    fp32 unless asked.
    """
    if precision == "int8":
        return False
    if requested is not None:
        return requested
    env = os.environ.get(ENV_FP16, "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    if precision not in (None, "fp16"):
        return False
    return (features or cpu_features()).fp16


def is_arm(features: CpuFeatures) -> bool:
    return features.machine in ARM_MACHINES


def kernel_families(features: CpuFeatures | None = None) -> list[str]:
    """The matrix-product kernel families LiteRT's XNNPACK can pick on this CPU, each
    with the precision that reaches it. On the Cortex-A76 the aarch64 lane counts which
    ran (scripts/support/kernels.py; docs/arm.md, "Which kernels run"): fp32 in XNNPACK's
    NEON GEMMs, fp16 with the fp16 policy in its fp16-arithmetic GEMMs, int8's linear
    layers in KleidiAI's dotprod matmul (dynamically quantised activations x per-channel
    int8 weights). On qemu's `max` CPU the lane shows the rest: with i8mm (Apple M2/M3)
    int8 moves to KleidiAI's i8mm matmul; with SME (M4) int8 and fp32 both run
    KleidiAI's SME kernels. Empty off Arm: KleidiAI is Arm's alone."""
    f = features or cpu_features()
    if not is_arm(f):
        return []
    families = ["XNNPACK NEON fp32 GEMMs (fp32; fp16 without fp16 arithmetic)"]
    if f.fp16:
        families.append("XNNPACK fp16-arithmetic GEMMs (fp16 models, FORCE_FP16)")
    if f.dotprod:
        families.append("KleidiAI int8 matmul, dotprod (int8 models: qai8dxp x qsi8cxp)")
    if f.i8mm:
        families.append("KleidiAI int8 matmul, i8mm (int8 models)")
    if f.sme:
        families.append("KleidiAI SME matmuls (fp32 and int8 models)")
    return families


def recommended_precision(features: CpuFeatures | None = None) -> tuple[str, str]:
    """(precision, why) for this CPU, from what docs/arm.md's kernel table shows on the
    Cortex-A76: fp16 with fp16 arithmetic runs 0.52x fp32's instructions (Pearson
    >= 0.9999 against it); int8 reaches KleidiAI, but its attention products stay fp32,
    so it saves only 8% more, at int8's accuracy (Pearson ~0.99): named, not chosen."""
    f = features or cpu_features()
    if is_arm(f) and f.fp16:
        why = "fp16 arithmetic: about half fp32's work at fp32's accuracy"
        if f.dotprod or f.i8mm:
            why += (
                "; int8 runs KleidiAI's kernels here but keeps attention in fp32: "
                "little less work, at int8's accuracy"
            )
        return "fp16", why
    if is_arm(f) and (f.dotprod or f.i8mm):
        return "int8", "no fp16 arithmetic, but KleidiAI's int8 kernels run here"
    return "fp16", "half fp32's file and memory; it computes in fp32 on this CPU"


def default_threads(features: CpuFeatures | None = None) -> int:
    """All cores, at most 4 (a Pi 5 has 4; more is untested on big machines)."""
    cores = (features or cpu_features()).cores
    return max(1, min(4, cores))


# The Pi firmware's throttling word (``vcgencmd get_throttled``; the kernel's
# raspberrypi firmware driver prints it as hex in sysfs): bit -> meaning.
THROTTLE_BITS = {
    0: "under_voltage",
    1: "arm_frequency_capped",
    2: "throttled",
    3: "soft_temperature_limit",
    16: "under_voltage_occurred",
    17: "arm_frequency_capped_occurred",
    18: "throttled_occurred",
    19: "soft_temperature_limit_occurred",
}


def health(root: str = "/") -> dict[str, object]:
    """SoC temperature (Celsius) and the Pi's throttling flags, from sysfs; None for
    what this machine does not expose. Cheap: a few small reads, no processes."""
    base = os.path.join(root, "sys")
    temperature: float | None = None
    for zone in thermal_zones(root):
        text = read_line(os.path.join(zone, "temp"))
        if text.lstrip("-").isdigit():
            temperature = round(int(text) / 1000, 1)
            break
    throttled: dict[str, object] | None = None
    for path in _glob(base, "devices/platform/soc*/*firmware*/get_throttled"):
        try:
            word = int(read_line(path), 16)
        except ValueError:
            continue
        throttled = {"raw": hex(word), **{n: bool(word >> b & 1) for b, n in THROTTLE_BITS.items()}}
        break
    else:
        # Newer kernels deprecate get_throttled for hwmon, which has under-voltage only.
        for hwmon in _glob(base, "class/hwmon/hwmon*"):
            if read_line(os.path.join(hwmon, "name")) == "rpi_volt":
                alarm = read_line(os.path.join(hwmon, "in0_lcrit_alarm"))
                if alarm in ("0", "1"):
                    throttled = {"under_voltage": alarm == "1"}
                break
    return {"temperature_c": temperature, "throttled": throttled}


def _glob(base: str, pattern: str) -> list[str]:
    import glob

    return sorted(glob.glob(os.path.join(base, pattern)))


def thermal_zones(root: str = "/") -> list[str]:
    """The thermal zones' folders, the CPU's first (a zone whose type names it)."""
    zones = _glob(os.path.join(root, "sys"), "class/thermal/thermal_zone*")
    zones.sort(key=lambda z: "cpu" not in read_line(os.path.join(z, "type")))
    return zones


def read_line(path: str) -> str:
    """A small sysfs file's text, stripped; "" when it cannot be read."""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""
