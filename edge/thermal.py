"""Keeping the SoC under a temperature: a controller that spaces frames out, smoothly.

A Raspberry Pi 5 inferring without pause heats until its firmware lowers the clock
(from 80 °C, again at 85 °C): the frame rate falls anyway, and the SoC sits at its
limit. ``Controller`` does better by choosing the limit: above ``daemon.thermal_target``
it lowers the *duty*, the share of its own unspaced frame rate the daemon may run at,
and the daemon spaces its core runs so that each starts at least ``period / duty``
after the one before (``period``: the recent time between them, unspaced). The CPU's
work, and so its heat, follows the frame rate. Below the target the duty returns to 1
and frames come at the camera's (or the core's) pace again.

The controller is proportional-integral on the temperature's error, in duty per
degree: a SoC's temperature follows its power with a lag of a minute or more (a first
order: ``SimulatedSoC``), and power follows the duty. The proportional part answers at
once (7 °C over the target takes the duty to its floor), the integral part removes the
steady error; both are sized for a SoC that rises ``RISE_C`` at full duty with a time
constant from seconds to a few minutes, and damped there (tests/test_thermal.py); the
integral stops where the duty is clamped (no wind-up). ``SimulatedSoC`` is that SoC in
numbers, for tests and for trying the controller on a machine with no Pi's heat: it
writes a temperature file, as sysfs would, from a process's CPU use (``simulate``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.platform import read_line, thermal_zones

log = logging.getLogger("edge.daemon")
THERMAL_PATH = "DA3_EDGE_THERMAL_PATH"  # the temperature file (millidegrees, as sysfs)
RISE_C = 40.0  # a Pi 5 without a cooler: ~40 °C above idle at a whole core budget
KP = 6.0 / RISE_C  # duty per °C: 0.15 (under 7 °C over: the duty is 0 by this part alone)
TI_S = 30.0  # integral time: damped for time constants from ~20 s to minutes
FLOOR = 0.05  # the least duty: a frame every 20 core runs' time, never none
EVERY_S = 1.0  # seconds between updates


@dataclass(frozen=True)
class Reading:
    """What the controller made of one temperature (``status.json``'s ``thermal``)."""

    temperature_c: float | None
    target_c: float
    duty: float  # the share of the unspaced frame rate allowed (1: no spacing)
    why: str

    def record(self, interval_s: float) -> dict[str, object]:
        return {
            "temperature_c": self.temperature_c,
            "target_c": self.target_c,
            "duty": round(self.duty, 3),
            "interval_s": round(interval_s, 3),
            "why": self.why,
        }


class Controller:
    """The duty for each temperature, in time order (one thread)."""

    def __init__(self, target_c: float, *, kp: float = KP, ti_s: float = TI_S) -> None:
        self.target_c = target_c
        self.kp, self.ki = kp, kp / ti_s
        self._integral = 1.0  # the duty the integral part holds (1: no spacing)
        self._last: float | None = None
        self.duty = 1.0

    def update(self, now: float, temperature_c: float | None) -> Reading:
        """The duty after a temperature read at ``now`` (monotonic seconds); None (no
        sensor, a read that failed) keeps the duty as it is."""
        if temperature_c is None:
            return Reading(None, self.target_c, self.duty, "no temperature to read")
        error = temperature_c - self.target_c
        dt = 0.0 if self._last is None else min(now - self._last, 10 * EVERY_S)
        self._last = now
        integral = self._integral - self.ki * error * dt
        self._integral = min(1.0, max(FLOOR, integral))  # no wind-up at either clamp
        self.duty = min(1.0, max(FLOOR, self._integral - self.kp * error))
        if self.duty >= 1.0:
            why = f"under {self.target_c:g} °C: frames at the camera's pace"
        else:
            why = f"at {temperature_c:.1f} °C, target {self.target_c:g} °C: frames spaced"
        return Reading(temperature_c, self.target_c, self.duty, why)


def interval(duty: float, period_s: float) -> float:
    """The least time from one core run's start to the next for ``duty``, when they
    come ``period_s`` apart unspaced: 0 at 1."""
    return 0.0 if duty >= 1.0 else period_s / duty


class Cooling:
    """The daemon's thermal control: the sensor read every ``EVERY_S``, the controller
    for the configured target (made again when a reload changes it; none at 0)."""

    def __init__(self, sensor: str | None) -> None:
        self.sensor = sensor
        self.controller: Controller | None = None
        self.reading: Reading | None = None
        self._next = 0.0

    def step(self, now: float, target_c: float) -> float | None:
        """The duty to run at, once a new reading is due (else None: as it is); the
        spacing's start and end are logged."""
        if self.controller is None or self.controller.target_c != target_c:
            self.controller = Controller(target_c) if target_c else None
            self.reading, self._next = None, 0.0
            if self.controller is None:
                return 1.0
        if self.controller is None or now < self._next:
            return None
        self._next = now + EVERY_S
        was = self.spaced
        self.reading = self.controller.update(now, read_celsius(self.sensor))
        if was != self.spaced:
            log.info("thermal: %s", self.reading.why)
        return self.reading.duty

    @property
    def spaced(self) -> bool:
        return self.reading is not None and self.reading.duty < 1.0

    def record(self, target_c: float, interval_s: float) -> dict[str, object]:
        """status.json's ``thermal``: the temperature, the target, the duty and the
        spacing it imposes, and why."""
        if not target_c:
            return {"target_c": 0, "why": "off (daemon.thermal_target = 0)"}
        if self.reading is None:
            return {"target_c": target_c, "why": "not read yet"}
        return self.reading.record(interval_s)


def sensor_path() -> str | None:
    """The SoC's temperature file: ``$DA3_EDGE_THERMAL_PATH``, else the CPU's thermal
    zone (the first zone whose type names the CPU, else the first), else None."""
    given = os.environ.get(THERMAL_PATH)
    if given:
        return given
    zones = thermal_zones()
    return os.path.join(zones[0], "temp") if zones else None


def read_celsius(path: str | None) -> float | None:
    """The temperature in ``path`` (millidegrees, as sysfs writes it), or None."""
    try:
        return int(read_line(path)) / 1000 if path else None
    except ValueError:
        return None


@dataclass
class SimulatedSoC:
    """A SoC's temperature as a first order in its power: it tends to ``ambient_c +
    rise_c * load`` (``load``: CPU-seconds a second over ``cores``; more than 1 when a
    process gets more CPU than ``cores`` says, as a calibration may) with time constant
    ``tau_s``. The default is a Pi 5 without a cooler at a 25 °C room, its time sped up
    (a real one's constant is a minute or more): 4 cores, 40 °C above the room at all
    of them busy."""

    ambient_c: float = 25.0
    rise_c: float = RISE_C
    tau_s: float = 20.0
    cores: float = 4.0
    temperature_c: float = 45.0

    def step(self, dt: float, cpu_seconds: float) -> float:
        """The temperature after ``dt`` seconds in which ``cpu_seconds`` were used."""
        load = cpu_seconds / dt / self.cores if dt > 0 else 0.0  # no ceiling: no dead zone
        settle = self.ambient_c + self.rise_c * load
        self.temperature_c += (settle - self.temperature_c) * min(1.0, dt / self.tau_s)
        return self.temperature_c


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) used so far by process ``pid`` and its children
    alive now (the daemon and its core's worker)."""
    from edge import procfs

    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = procfs.stat_fields(entry.name)
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(entry.name) == pid or fields[1] == str(pid):
            total += int(fields[11]) + int(fields[12])
    return total / tick


def simulate(pid: int, path: str, soc: SimulatedSoC, stop: Any, every: float = 0.5) -> None:
    """Drive the temperature file ``path`` from process ``pid``'s CPU use through
    ``soc`` every ``every`` seconds until ``stop`` (a threading.Event) is set: a Pi 5's
    heat on a machine that has none, for the daemon's controller to act on."""
    import time

    from edge import atomic

    last_t, last_cpu = time.monotonic(), tree_cpu_seconds(pid)
    while not stop.wait(every):
        now, cpu = time.monotonic(), tree_cpu_seconds(pid)
        celsius = soc.step(now - last_t, max(0.0, cpu - last_cpu))
        last_t, last_cpu = now, cpu
        atomic.write_bytes(Path(path), f"{round(celsius * 1000)}\n".encode(), durable=False)
