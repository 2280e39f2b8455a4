"""``da3-edge config``: read and change the config file in place, checked first.

``set`` keeps the file's comments, order and layout (tomlkit round-trips TOML), checks
the whole changed file by the daemon's, serve's and publish's own rules and against the
installed models before anything is written, and replaces the file atomically with its
owner and mode kept. A refusal is one line, and the file is left as it was.
``password`` gives the page's login (serve.basic_auth_file) a new random password,
printed once, the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from edge import atomic
from edge import config as config_mod
from edge.errors import ConfigError, EdgeError, OutputError, UsageError, first_line

DEFAULT = "/etc/da3-edge/da3-edge.toml"  # the units' --config
SERVICE_MODELS = "/opt/da3-edge/models"  # the daemon unit's DA3_EDGE_MODELS
# What each section's change needs, for --reload: the daemon re-reads its file on
# SIGHUP (reload); serve and publish read theirs at start (restart). Only running
# units are touched (try-...).
UNITS: dict[str, tuple[tuple[str, str], ...]] = {
    "camera": (("try-reload-or-restart", "da3-edge"),),
    "model": (("try-reload-or-restart", "da3-edge"),),
    "depth": (("try-reload-or-restart", "da3-edge"),),
    "daemon": (("try-reload-or-restart", "da3-edge"),),
    "store": (
        ("try-reload-or-restart", "da3-edge"),
        ("try-restart", "da3-edge-serve"),
        ("try-restart", "da3-edge-publish"),
    ),
    "serve": (("try-restart", "da3-edge-serve"),),
    "mqtt": (("try-restart", "da3-edge-publish"),),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge config",
        description=(
            "Read or change the config file in place (comments and order kept). set checks "
            "the whole changed file as the daemon, serve and publish would, and against the "
            "installed models (where there are any yet), before it writes; a refusal is one "
            "line and changes nothing."
        ),
        epilog=(
            "examples: da3-edge config get model.size; sudo da3-edge config set camera.fps 5 "
            "--reload; da3-edge config check; sudo da3-edge config password --reload"
        ),
    )
    p.add_argument(
        "--config", metavar="FILE", default=DEFAULT, help=f"the config file (default {DEFAULT})"
    )
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = sub.add_parser("get", help="print a key's value in force (the file's, else the default)")
    get.add_argument("key", metavar="SECTION.KEY")
    put = sub.add_parser("set", help="change a key, checked first; --reload applies it")
    for action in (get, put):  # --config after the action too: config set K V --config F
        action.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS)
    put.add_argument("key", metavar="SECTION.KEY")
    put.add_argument("value", metavar="VALUE", help="a number, true/false, text or [list]")
    put.add_argument(
        "--reload",
        action="store_true",
        help="then reload the daemon, or restart serve or publish, where the change needs it "
        "and the unit runs (systemctl)",
    )
    check_action = sub.add_parser(
        "check", help="check the whole file and the models it names; exit 1 if bad"
    )
    login = sub.add_parser(
        "password",
        help="a new random password for the page's login (the file serve.basic_auth_file "
        "names): printed once, only its hash written; --reload restarts serve with it",
    )
    login.add_argument(
        "--user", metavar="NAME", help="the login's user name (default: the one the file holds)"
    )
    login.add_argument(
        "--reload",
        action="store_true",
        help="then restart serve where it runs (systemctl), so the old password stops working",
    )
    for action in (check_action, login):
        action.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS)
    return p


def field_of(key: str) -> tuple[str, str, Any]:
    """``SECTION.KEY`` -> (section, key, its default); UsageError if there is none."""
    section, dot, name = key.partition(".")
    cls = config_mod.SECTIONS.get(section)
    if not dot or cls is None:
        known = ", ".join(config_mod.SECTIONS)
        raise UsageError(f"{key!r}: use SECTION.KEY, SECTION one of {known}")
    names = [f.name for f in fields(cls)]
    if name not in names:
        raise UsageError(f"{key}: unknown key (known in [{section}]: {', '.join(names)})")
    return section, name, getattr(cls(), name)


def value_of(text: str, default: Any) -> Any:
    """VALUE as the key's type takes it: text as it is for a text key (quotes optional),
    TOML for the rest; what TOML cannot read stays text, for the check to name."""
    import tomlkit

    try:
        parsed = tomlkit.parse(f"v = {text}")["v"]
    except Exception:  # not TOML: a bare word
        parsed = None
    if isinstance(default, str):
        return str(parsed) if isinstance(parsed, str) else text
    if isinstance(default, tuple) and parsed is None:
        return [part.strip() for part in text.split(",") if part.strip()]
    return text if parsed is None else parsed


def shown(value: Any) -> str:
    """A value as ``get`` prints it: text bare, the rest as TOML."""
    import tomlkit

    if isinstance(value, str):
        return value or '""'
    if isinstance(value, tuple):
        value = list(value)
    return str(tomlkit.item(value).as_string())


def models_dir(model: config_mod.ModelConfig, path: str) -> str | None:
    """Where the daemon that reads ``path`` finds its models: ``model.dir``; else, for
    the service's own config, the unit's folder; else the user's default (None)."""
    if model.dir:
        return model.dir
    if os.environ.get("DA3_EDGE_MODELS"):
        return None
    return SERVICE_MODELS if Path(path) == Path(DEFAULT) else None


def check(text: str, path: str, *, models_yet: bool = False) -> config_mod.Config:
    """Every section by its own rules, then the models the config names; ``models_yet``
    (set's): only where there are any, so that a config readied before the models exist
    (on a laptop, for a card whose Pi builds them) is checked but for them, saying so."""
    from edge.models import MANIFEST, resolve_models_dir

    config = config_mod.parse(text, path, parts=tuple(config_mod.SECTIONS))
    directory = models_dir(config.model, path)
    folder = resolve_models_dir(directory)
    if models_yet and not (folder / MANIFEST).exists():
        print(
            f"models: not checked: there are none at {folder} yet (a Pi with the models "
            "checks model.size and model.precision against them)",
            file=sys.stderr,
        )
        return config
    from edge.pipeline import check_models  # numpy's: only where there are models

    check_models(config, text, directory)
    return config


def with_key(text: str, where: str, key: str, raw: str) -> tuple[str, Any]:
    """``text`` with ``key`` set to ``raw`` (comments, order and layout kept), unchecked;
    and the key's value before."""
    import tomlkit

    section, name, default = field_of(key)
    try:
        doc = tomlkit.parse(text)
    except Exception as exc:  # tomlkit's errors: the config's own parser names the line
        config_mod.parse(text, where, parts=())
        raise ConfigError(f"{where}: not TOML ({first_line(exc)})") from None
    if section not in doc:
        doc.add(tomlkit.nl())
        doc.add(section, tomlkit.table())
    table = doc[section]
    old = table.get(name, default)
    table[name] = value_of(raw, default)
    new_text = tomlkit.dumps(doc)
    return new_text + ("" if new_text.endswith("\n") else "\n"), old


def changed(path: Path, key: str, raw: str) -> tuple[str, Any, Any]:
    """The file's text with ``key`` set to ``raw``, checked; with the old and new value."""
    section, name, _ = field_of(key)
    new_text, old = with_key(config_mod.read_text(path), str(path), key, raw)
    try:
        config = check(new_text, str(path), models_yet=True)
    except ConfigError:
        if key not in BUILDS or not build_missing(new_text, str(path)):
            raise
        config = check(new_text, str(path), models_yet=True)
    return new_text, old, getattr(getattr(config, section), name)


BUILDS = ("model.size", "model.precision")  # the keys whose models a set can build


def build_missing(text: str, path: str) -> bool:
    """The cores ``text`` asks for and the models lack, built from the release the
    models were built from when it is at hand (their manifest names it): progress on
    stderr, True. False when there is none to build from: the refusal stands."""
    from edge import corebuild, graphs
    from edge.models import Manifest, resolve_models_dir

    config = config_mod.parse(text, path, parts=tuple(config_mod.SECTIONS))
    folder = resolve_models_dir(models_dir(config.model, path))
    try:
        manifest = Manifest.load(folder)
    except EdgeError:
        return False
    sources = [
        c.provenance.get("source") for c in manifest.cores() if c.weights.startswith("sha256:")
    ]
    release = next((Path(s) for s in sources if s and Path(s).is_file()), None)
    if release is None:
        return False
    shapes, precisions = graphs.cores_for(config, path)
    _say(f"models: none for this {config.model.precision} model.size; building them from {release}")
    corebuild.build_models(release, folder, shapes, precisions, progress=_say)
    return True


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def reload(section: str) -> list[str]:
    """systemctl for what a change of ``section`` needs; the lines it did."""
    done = []
    for verb, unit in UNITS[section]:
        proc = subprocess.run(["systemctl", verb, unit], capture_output=True, text=True)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            why = lines[0] if lines else f"exit {proc.returncode}"
            raise EdgeError(f"systemctl {verb} {unit}: {why}")
        done.append(f"systemctl {verb} {unit}")
    return done


INSTALL_LOCK = "/run/da3-edge-install.lock"  # scripts/install-pi.sh's (flock), root's
LOCK_WAIT_S = 30.0


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """``path`` for one writer at a time, from its read to its replacement: two `config
    set` at once otherwise both read the old file and the second write loses the first
    change. The lock is on the file itself (flock), taken again when the file was
    replaced while this waited; the service's config also takes the installer's lock,
    so neither writes it under the other. A holder that keeps it past LOCK_WAIT_S is
    named in one line."""
    with contextlib.ExitStack() as stack:
        if path == Path(DEFAULT) and os.geteuid() == 0:
            stack.enter_context(_flock(Path(INSTALL_LOCK), os.O_WRONLY | os.O_CREAT, "an install"))
        while True:
            fd = stack.enter_context(_flock(path, os.O_RDONLY, "another `da3-edge config set`"))
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            stack.close()  # replaced while this waited: lock what is there now
        yield


@contextlib.contextmanager
def _flock(path: Path, flags: int, holder: str) -> Iterator[int]:
    try:
        fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise OutputError(f"{path}: cannot open it ({exc.strerror or exc})") from None
    try:
        try:
            import fcntl
        except ImportError:  # Windows (a card-time config on a laptop): one writer there
            yield fd
            return
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EdgeError(
                        f"{path}: {holder} has held it for {LOCK_WAIT_S:g} s: try again later"
                    ) from None
                time.sleep(0.05)
        yield fd
    finally:
        os.close(fd)


def new_login(path: Path, user: str | None) -> tuple[Path, str, str]:
    """The login file the config at ``path`` names (serve.basic_auth_file) given a new
    random password: only its hash written, atomically, the file's owner and mode kept
    (serve's user reads it, no one else). (the file, the user, the password)."""
    from edge import passwords

    config = config_mod.parse(config_mod.read_text(path), str(path), parts=())
    if not config.serve.basic_auth_file:
        raise ConfigError(
            f"{path}: serve.basic_auth_file is not set: the page has no login to reset "
            "(da3-edge card --view lan, or the installer's --serve-users, gives it one)"
        )
    users = Path(config.serve.basic_auth_file)
    line, st = _login_line(users)
    name = user if user is not None else line.partition(":")[0]
    if not name or ":" in name or not name.isprintable() or name != name.strip():
        why = "--user" if user is not None else f"{users} holds no user:secret line: give --user"
        raise UsageError(f"{why}: a user name has no ':', spaces at its ends or control characters")
    password = passwords.new_password()
    try:
        atomic.write_bytes(users, f"{name}:{passwords.hashed(password)}\n".encode(), like=st)
    except OSError as exc:
        raise OutputError(f"{users}: cannot write it ({exc.strerror or exc})") from None
    return users, name, password


def _login_line(users: Path) -> tuple[str, os.stat_result]:
    """The first line of a login file, and its stat (not through a link)."""
    from edge.credentials import read_once

    data, st = read_once(users, "serve.basic_auth_file")
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return (lines[0].strip() if lines else ""), st


def _password(path: Path, ns: argparse.Namespace) -> int:
    with locked(path):
        users, name, password = new_login(path, ns.user)
    print(f"New password for the page's login {name}: {password}")
    print(f"Keep it now: it is shown once, and {users} holds only its hash.")
    if ns.reload:
        for line in reload("serve"):
            print(line)
    else:
        print("serve takes it when it next starts (--reload restarts it now).")
    sys.stdout.flush()
    return 0


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    path = Path(ns.config)
    if ns.action == "password":
        return _password(path, ns)
    if ns.action == "check":
        check(config_mod.read_text(path), str(path))
        print(f"{path}: ok")
        return 0
    if ns.action == "get":
        section, name, _ = field_of(ns.key)
        config = config_mod.parse(config_mod.read_text(path), str(path), parts=())
        print(shown(getattr(getattr(config, section), name)))
        return 0
    with locked(path):
        new_text, old, new = changed(path, ns.key, ns.value)
        try:
            atomic.write_bytes(path, new_text.encode(), like=os.stat(path))
        except OSError as exc:
            raise OutputError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    print(f"{ns.key} = {shown(new)} (was {shown(old)}) in {path}")
    if ns.reload:
        for line in reload(ns.key.partition(".")[0]):
            print(line)
    sys.stdout.flush()
    return 0
