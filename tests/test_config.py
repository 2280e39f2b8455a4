"""The daemon's config: the shipped default, validation naming key and line, flags."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from edge import config
from edge.errors import ConfigError
from scripts.support import ROOT


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
        (
            "[store]\nformats = ['tiff']\n",
            "c.toml:2: store.formats has unknown value(s) ['tiff'] (use png, npz",
        ),
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
    flags = {"camera.source": "replay:/x@2", "model.precision": "int8", "store.dir": "/tmp/s"}
    out = config.with_overrides(base, {**flags, "model.size": 280})
    assert (
        out.camera.source == "replay:/x@2"
        and out.model.precision == "int8"
        and out.store.dir == "/tmp/s"
        and out.model.size == 280
    )
    assert out.model.threads == 0  # not given: the file's (default) value stays
    with pytest.raises(ConfigError, match=r"camera\.source"):
        config.with_overrides(base, {"camera.source": "nope"})


def _number_keys(kind: type) -> list[tuple[str, str]]:
    """Every (section, key) whose value is a number of ``kind`` (bool is not an int here)."""
    return [
        (section, f.name)
        for section, cls in config.SECTIONS.items()
        for f in dataclasses.fields(cls)
        if type(getattr(cls(), f.name)) is kind
    ]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(("section", "key"), _number_keys(float))
def test_non_finite_numbers_are_refused_naming_the_key(section: str, key: str, value: str) -> None:
    """TOML has nan and inf, and every range check is false for nan: each float key
    refuses them by name, whichever sections the caller validates."""
    with pytest.raises(ConfigError) as info:
        config.parse(f"[{section}]\n{key} = {value}\n", "c.toml", parts=())
    assert str(info.value) == (
        f"c.toml:2: {section}.{key} must be a finite number, not {value.lstrip('+')}"
    )


@pytest.mark.parametrize(("section", "key"), _number_keys(float) + _number_keys(int))
def test_every_number_has_an_upper_bound(section: str, key: str) -> None:
    """A value past any sane setting (1e12 of seconds, frames, bytes or pixels) is
    refused naming its key, not left to overflow a deadline or a buffer."""
    with pytest.raises(ConfigError) as info:
        config.parse(f"[{section}]\n{key} = 1000000000000\n", "c.toml", parts=config.SECTIONS)
    assert str(info.value).startswith(f"c.toml:2: {section}.{key} must be "), info.value


@pytest.mark.parametrize(
    ("fps", "timeout", "ok"),
    [(0.2, 2.0, False), (0.5, 2.0, False), (1.0, 2.0, True), (0.2, 10.0, True)],
)
def test_a_read_timeout_shorter_than_two_frames_is_refused(
    fps: float, timeout: float, ok: bool
) -> None:
    """picamera2 waits ``camera.timeout`` for each frame: at ``camera.fps`` below
    2 / timeout every read would time out (one frame per reopen)."""
    text = f"[camera]\nfps = {fps}\ntimeout = {timeout}\n[daemon]\nstuck_after = 30.0\n"
    if ok:
        assert config.parse(text, "c.toml").camera.fps == fps
        return
    with pytest.raises(ConfigError) as info:
        config.parse(text, "c.toml")
    assert str(info.value) == (
        f"c.toml:2: camera.fps {fps:g} gives a frame every {1 / fps:g} s: camera.timeout "
        f"({timeout:g} s) must be at least two frame intervals ({2 / fps:g} s)"
    )


# What may keep a default that a config key has too, and why.
OWN_DEFAULTS = {
    "PipelineSpec": "the Python API of a still (snap, bench): the daemon's config sets each",
    "Controls": "nothing asked of the camera, which the config's defaults are too",
    "DepthFrame": "a record's field, filled from the pipeline that made the frame",
    "fake_models": "the scripted stand-in's own model folder",
}


def second_places(root: Path, allowed: Collection[str] = tuple(OWN_DEFAULTS)) -> list[str]:
    """Parameters and fields in ``root``/edge (config.py aside) named like a config key,
    with a default equal to that key's: the default kept in a second place; and any
    message there that refuses a key's value (its bounds kept in a second place)."""
    from dataclasses import fields

    defaults: dict[str, list[object]] = {}
    for cls in config.SECTIONS.values():
        for f in fields(cls):
            defaults.setdefault(f.name, []).append(f.default)
    keys = {f"{s}.{f.name}" for s, c in config.SECTIONS.items() for f in fields(c)}
    found = []
    for path in sorted((root / "edge").rglob("*.py")):
        if path == root / "edge" / "config.py":
            continue
        where = path.relative_to(root)
        for owner, name, value in _defaults_in(ast.parse(path.read_text())):
            if name in defaults and owner not in allowed and value in defaults[name]:
                found.append(f"{where}: {owner}({name}={value!r})")
        found += [f"{where}: {key} must ..." for key in keys if f"{key} must" in path.read_text()]
    return found


def _defaults_in(tree: ast.AST) -> Iterator[tuple[str, str, object]]:
    """(function or class, name, literal default) of every parameter and class field."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            positional = [*a.posonlyargs, *a.args]
            pairs = [
                *zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True),
                *zip(a.kwonlyargs, a.kw_defaults, strict=True),
            ]
            for arg, default in pairs:
                if default is not None:
                    yield from _literal(node.name, arg.arg, default)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if not isinstance(item, ast.AnnAssign) or item.value is None:
                    continue
                if isinstance(item.target, ast.Name):
                    yield from _literal(node.name, item.target.id, item.value)


def _literal(owner: str, name: str, node: ast.expr) -> Iterator[tuple[str, str, object]]:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return
    if value is not None:
        yield owner, name, value


def test_a_setting_is_declared_in_one_place() -> None:
    """Every key's default, bounds and doc live in its declaration (edge/config.py); the
    shipped file and docs/reference/config.md are made from it (tests/test_docs.py)."""
    assert second_places(ROOT) == []
    kept = {line.split(": ")[1].split("(")[0] for line in second_places(ROOT, allowed=())}
    assert kept == set(OWN_DEFAULTS), "OWN_DEFAULTS names one that keeps none"


def test_a_default_or_bound_kept_elsewhere_is_found(tmp_path: Path) -> None:
    (tmp_path / "edge").mkdir()
    (tmp_path / "edge" / "store.py").write_text(
        "class FrameStore:\n    def __init__(self, keep_frames=100, preview_max_side=0):\n"
        "        if keep_frames < 1:\n            raise ValueError('store.keep_frames must be')\n"
    )
    assert second_places(tmp_path) == [
        "edge/store.py: __init__(keep_frames=100)",
        "edge/store.py: store.keep_frames must ...",
    ]


def test_each_flag_a_key_declares_is_its_commands_and_names_the_key() -> None:
    """A key's ``flag`` is the one `da3-edge run` (serve for [serve]) takes, and its
    help is made from the key's doc and says which key it overrides."""
    from dataclasses import fields

    from edge.commands import run, serve

    flagged = 0
    for section, cls in config.SECTIONS.items():
        for f in fields(cls):
            if not f.metadata["flag"]:
                continue
            parser = serve.parser() if section == "serve" else run.parser()
            action = next(a for a in parser._actions if f.metadata["flag"] in a.option_strings)
            assert action.help == config.flag_help(f"{section}.{f.name}"), (section, f.name)
            assert action.help.startswith(f.metadata["doc"].split(". ")[0].rstrip("."))
            flagged += 1
    assert flagged == 9


def test_a_flag_backed_key_is_one_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key declared with a flag is all it takes: the parser gets the flag (its type,
    bounds and --help from the declaration), and the given value overrides the file."""
    import argparse

    @dataclasses.dataclass(frozen=True)
    class WithNap(config.DaemonConfig):
        nap: float = config.setting(
            1.0,
            "Seconds to nap between frames. Longer.",
            flag="--nap",
            low=0,
            high=9,
            unit="seconds",
            metavar="S",
        )

    monkeypatch.setitem(config.SECTIONS, "daemon", WithNap)
    parser = argparse.ArgumentParser(prog="x", exit_on_error=False)
    config.add_flags(parser, ("daemon",))
    help = " ".join(parser.format_help().split())
    assert "--nap S Seconds to nap between frames (config daemon.nap)" in help
    base = dataclasses.replace(config.Config(), daemon=WithNap())
    given = config.flagged(parser.parse_args(["--nap", "2.5"]), ("daemon",))
    assert given == {"daemon.nap": 2.5}
    assert config.with_overrides(base, given, parts=("daemon",)).daemon.nap == 2.5  # type: ignore[attr-defined]
    assert config.flagged(parser.parse_args([]), ("daemon",)) == {}
    with pytest.raises(argparse.ArgumentError, match=r"must be 0 to 9 .*config daemon\.nap"):
        parser.parse_args(["--nap", "10"])


def test_the_commands_take_their_flags_from_the_declarations() -> None:
    """`run` and `serve` add no flag of a config key by hand: each key's flag is in
    their --help with the key named."""
    from edge.commands import run, serve

    for command, parts in ((run, config.DAEMON_PARTS), (serve, ("serve",))):
        text = " ".join(command.parser().format_help().split())
        for key, f in config.flag_keys(parts):
            assert f.metadata["flag"] in text and f"(config {key})" in text
        source = Path(str(command.__file__)).read_text()
        assert not [f for _, f in config.flag_keys(parts) if f'"{f.metadata["flag"]}"' in source]


def test_a_flags_value_is_refused_as_its_declaration_says() -> None:
    """A value its key would refuse is argparse's one-line usage error naming the flag
    and the key (not the config file): bounds, choices and a rule of the key's own."""
    import argparse

    from edge.commands import run

    parser = run.parser()
    parser.exit_on_error = False
    for flag, value, said in (
        ("--size", "300", "must be a multiple of 14"),
        ("--threads", "999", r"must be 0 \(auto\) to 256"),
        ("--precision", "fp8", "invalid choice"),
    ):
        with pytest.raises(argparse.ArgumentError, match=said):
            parser.parse_args([flag, value])
    assert parser.parse_args(["--size", "280"]).size == 280
    assert parser.parse_args(["--size", "0"]).size == 0  # the key's 0: the default size
