"""CPU feature detection and the fp16 arithmetic policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge import platform

pytestmark = pytest.mark.arm  # runs on the emulated Cortex-A76 too (docs/arm.md)

PI5 = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x4
CPU part\t: 0xd0b
CPU revision\t: 1
"""

PI4 = """processor\t: 0
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU part\t: 0xd08
"""

X86 = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de pse avx2 f16c avx512fp16
"""


def test_pi5_has_fp16_and_dotprod() -> None:
    f = platform.parse_cpuinfo(PI5, "aarch64")
    assert (f.fp16, f.dotprod, f.i8mm, f.sme) == (True, True, False, False)
    assert f.model == "Cortex-A76"
    assert platform.fp16_arithmetic(features=f) is True


def test_pi4_has_no_fp16() -> None:
    f = platform.parse_cpuinfo(PI4, "aarch64")
    assert (f.fp16, f.dotprod) == (False, False)
    assert f.model == "Cortex-A72"
    assert platform.fp16_arithmetic(features=f) is False


def test_x86_never_counts_as_arm_fp16() -> None:
    # f16c / avx512fp16 are x86 flags; XNNPACK's FORCE_FP16 path is emulated there.
    f = platform.parse_cpuinfo(X86, "x86_64")
    assert (f.fp16, f.dotprod, f.i8mm, f.sme) == (False, False, False, False)
    assert f.model == "AMD EPYC 7B13"
    assert platform.fp16_arithmetic(features=f) is False


def test_policy_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    pi5 = platform.parse_cpuinfo(PI5, "aarch64")
    x86 = platform.parse_cpuinfo(X86, "x86_64")
    assert platform.fp16_arithmetic(False, pi5) is False
    assert platform.fp16_arithmetic(True, x86) is True
    monkeypatch.setenv(platform.ENV_FP16, "0")
    assert platform.fp16_arithmetic(features=pi5) is False
    monkeypatch.setenv(platform.ENV_FP16, "1")
    assert platform.fp16_arithmetic(features=x86) is True
    assert platform.fp16_arithmetic(False, x86) is False


def test_policy_by_model_precision() -> None:
    pi5 = platform.parse_cpuinfo(PI5, "aarch64")
    assert platform.fp16_arithmetic(features=pi5, precision="fp16") is True
    assert platform.fp16_arithmetic(features=pi5, precision="fp32") is False  # unless asked
    assert platform.fp16_arithmetic(True, pi5, precision="fp32") is True
    # XNNPACK cannot prepare the int8 model with FORCE_FP16 (tests/test_core.py): never.
    assert platform.fp16_arithmetic(features=pi5, precision="int8") is False
    assert platform.fp16_arithmetic(True, pi5, precision="int8") is False


def test_litert_needs_lse_on_arm() -> None:
    pi5 = platform.parse_cpuinfo(PI5, "aarch64")
    pi4 = platform.parse_cpuinfo(PI4, "aarch64")
    x86 = platform.parse_cpuinfo(X86, "x86_64")
    assert pi5.lse and not pi4.lse
    assert platform.litert_blocker(pi5) is None
    assert platform.litert_blocker(x86) is None
    reason = platform.litert_blocker(pi4)
    assert reason is not None and "Cortex-A72" in reason and "LSE" in reason


def test_kernel_families_follow_the_cpu_features() -> None:
    """The Pi 5 gets fp16 GEMMs and KleidiAI's dotprod int8 matmul, not i8mm or SME;
    the Pi 4 only fp32; x86 none (KleidiAI is Arm's); an M-series-like CPU all four."""
    pi5 = platform.parse_cpuinfo(PI5, "aarch64")
    pi4 = platform.parse_cpuinfo(PI4, "aarch64")
    x86 = platform.parse_cpuinfo(X86, "x86_64")
    families = platform.kernel_families(pi5)
    assert any("fp16-arithmetic" in f for f in families)
    assert any("KleidiAI int8 matmul, dotprod" in f for f in families)
    assert not any("i8mm" in f or "SME" in f for f in families)
    assert platform.kernel_families(pi4) == [
        "XNNPACK NEON fp32 GEMMs (fp32; fp16 without fp16 arithmetic)"
    ]
    assert platform.kernel_families(x86) == []
    m4 = platform.CpuFeatures("arm64", "Apple M4", True, True, True, True, 10, True)
    assert len(platform.kernel_families(m4)) == 5
    assert platform.recommended_precision(pi5)[0] == "fp16"
    assert "KleidiAI" in platform.recommended_precision(pi5)[1]
    assert "KleidiAI" not in platform.recommended_precision(pi4)[1]
    no_fp16 = platform.CpuFeatures("aarch64", "dotprod only", False, True, False, False, 4, True)
    assert platform.recommended_precision(no_fp16)[0] == "int8"


def test_this_machine_is_detected() -> None:
    f = platform.cpu_features()
    assert f.cores >= 1 and f.machine
    assert 1 <= platform.default_threads(f) <= 4


def test_health_reads_a_pis_temperature_and_throttling(tmp_path: Path) -> None:
    """The sysfs files a Pi 5 has (laid out under a fake root), as the kernel prints
    them: millidegrees, and the firmware's throttling word in hex."""
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-thermal\n")
    (zone / "temp").write_text("61850\n")
    fw = tmp_path / "sys/devices/platform/soc@107c000000/soc@107c000000:firmware"
    fw.mkdir(parents=True)
    (fw / "get_throttled").write_text("50005\n")
    got = platform.health(str(tmp_path))
    assert got["temperature_c"] == 61.9
    throttled = got["throttled"]
    assert isinstance(throttled, dict) and throttled["raw"] == "0x50005"
    on = sorted(k for k, v in throttled.items() if v is True)
    assert on == ["throttled", "throttled_occurred", "under_voltage", "under_voltage_occurred"]


def test_health_without_get_throttled_uses_hwmon_and_none_elsewhere(tmp_path: Path) -> None:
    hwmon = tmp_path / "sys/class/hwmon/hwmon1"
    hwmon.mkdir(parents=True)
    (hwmon / "name").write_text("rpi_volt\n")
    (hwmon / "in0_lcrit_alarm").write_text("1\n")
    assert platform.health(str(tmp_path)) == {
        "temperature_c": None,
        "throttled": {"under_voltage": True},
    }
    assert platform.health(str(tmp_path / "nothing")) == {"temperature_c": None, "throttled": None}
