"""The daemon's config: the shipped default, validation naming key and line, flags."""

from __future__ import annotations

import dataclasses

import pytest

from edge import config
from edge.errors import ConfigError


def test_shipped_default_is_the_built_in_default() -> None:
    """Every section of the shipped file parses to the built-in defaults."""
    parsed = config.parse(config.default_text(), "default.toml")
    assert parsed == dataclasses.replace(config.Config(), path="default.toml")
    assert set(config.SECTIONS) == {f.name for f in dataclasses.fields(config.Config)} - {"path"}
    for section, cls in config.SECTIONS.items():
        assert getattr(parsed, section) == cls(), section


def test_every_key_is_documented_with_its_flag() -> None:
    text = config.default_text()
    for section, cls in config.SECTIONS.items():
        assert f"[{section}]" in text
        for key in (f.name for f in dataclasses.fields(cls)):
            assert f"\n{key} = " in text, key
    for flag in (
        "--source",
        "--models",
        "--precision",
        "--size",
        "--stages",
        "--threads",
        "--store",
    ):
        assert flag in text, flag


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[camera]\nframerate = 3\n", "c.toml:2: camera.framerate: unknown key"),
        ('[camera]\naf = "macro"\n', "c.toml:2: camera.af must be one of continuous, auto"),
        (
            '[camera]\naf = "continuous"\nlens_position = 2.0\n',
            'c.toml:3: camera.lens_position needs af = "manual"',
        ),
        ("[camera]\nfps = 500\n", "c.toml:2: camera.fps must be 0 (the camera's own) or 0.1"),
        ("[camera]\nwidth = 'x'\n", "c.toml:2: camera.width must be an integer"),
        ("[camera]\ntimeout = -1\n", "c.toml:2: camera.timeout must be positive"),
        ("\n[model]\nprecision = 'fp8'\n", "c.toml:3: model.precision must be one of"),
        ("[cam]\n", "c.toml:1: cam: unknown section"),
        ("[model]\nworkers = 0\n", "c.toml:2: model.workers must be 1 to 8"),
        ("[model]\nsize = 281\n", "c.toml:2: model.size must be 0 (504 when exported, else"),
        (
            "[model]\nsize = 2016\n",
            "size 2016: the core's long side must be a multiple of 14 from 56 to 1008",
        ),
        ("[store]\nformats = ['tiff']\n", "c.toml:2: store.formats has unknown format(s)"),
        ("[camera]\nsource = 'usb'\n", "c.toml:2: camera.source is not a usable source"),
        ("[camera]\nsource = 'fake:explode'\n", "unknown step"),
        (
            "[camera]\nbackoff_min = 5.0\nbackoff_max = 1.0\n",
            "c.toml:3: camera.backoff_max must be at least backoff_min",
        ),
        (
            "[daemon]\nstuck_after = 1.0\n",
            "daemon.stuck_after must be at least twice camera.timeout",
        ),
        ("x = [", "c.toml: not valid TOML"),
    ],
)
def test_bad_values_name_the_key_and_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.parse(text, "c.toml")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_flags_override_the_file() -> None:
    base = config.parse("[model]\nprecision = 'fp32'\n[camera]\nsource = 'fake'\n", "c.toml")
    flags = config.Overrides(source="replay:/x@2", precision="int8", store="/tmp/s", size=280)
    out = config.with_overrides(base, flags)
    assert (
        out.camera.source == "replay:/x@2"
        and out.model.precision == "int8"
        and out.store.dir == "/tmp/s"
        and out.model.size == 280
    )
    assert out.model.threads == 0  # not given: the file's (default) value stays
    with pytest.raises(ConfigError, match=r"camera\.source"):
        config.with_overrides(base, config.Overrides(source="nope"))
