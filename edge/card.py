"""A Raspberry Pi OS card made ready for da3-edge's first boot (``da3-edge card``).

Raspberry Pi Imager writes a trixie card's boot partition with cloud-init's NoCloud seed
(``user-data``, ``network-config``, ``meta-data``) beside ``config.txt``. This module
adds the bundle the Pi installs from (``da3-edge/``: the installer, one wheel, the
models, a config) and one ``runcmd`` entry to Imager's ``user-data`` that runs
``first-boot.sh`` from it; everything Imager wrote stays as it was.

Plan first, write after: :func:`plan` checks everything (the partition, ``user-data``,
the models, the config, the room) and raises :class:`CardError` in one line before a
byte is written; :func:`apply` then writes only what differs, each file through a
temporary name and a rename, so a second run changes nothing.

``user-data`` is edited as text at the place PyYAML (the parser cloud-init uses) says the
``runcmd`` list ends, then parsed again: the result must be Imager's data plus the one
entry, or nothing is written. Comments, key order and quoting stay Imager's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge import atomic, deploy
from edge.errors import CardError, ConfigError

BUNDLE = "da3-edge"
FIRST_BOOT = f"/boot/firmware/{BUNDLE}/first-boot.sh"
# The runcmd entry: one list item, argv form (cloud-init quotes it for the shell).
ENTRY = ["bash", FIRST_BOOT]
ENTRY_TEXT = f"[bash, {FIRST_BOOT}]"
# Where the Pi fetches its models, when the card carries none (card --models URL):
# "URL SHA256", for first-boot.sh to pass to the installer's --models-url.
MODELS_URL = "models-url"
MODELS_BUILD = "models-build"  # no models on the card: the Pi builds them (hub, or RELEASE)
RELEASE = "release"  # DA3's release file on the card, for that build
# The LAN view's login on the card (da3-edge card --view lan): user:scrypt$... only.
SERVE_USERS = "serve-users"
LAN_LOGIN = f"/etc/da3-edge/{SERVE_USERS}"  # where the installer puts it, as serve reads it
LAN_USER = "viewer"
LAN_PORT = 8000
# What first-boot.sh leaves on the partition once it has installed (the bundle goes).
INSTALLED = "da3-edge-installed.txt"
# Room kept free beyond the bundle: FAT's directory entries, the user-data's growth.
SLACK_BYTES = 1 << 20


@dataclass
class Plan:
    """What ``apply`` will write: each destination path (relative to the boot
    partition) and its bytes' source, the new user-data text (None: unchanged), and
    the bundle files no longer wanted (an older wheel)."""

    boot: Path
    user_data_path: Path
    files: dict[str, Path] = field(default_factory=dict)
    user_data: str | None = None
    stale: list[Path] = field(default_factory=list)
    need_bytes: int = 0
    free_bytes: int = 0

    @property
    def changes(self) -> int:
        return len(self.files) + (self.user_data is not None) + len(self.stale)


def partition(arg: str, windows: bool = os.name == "nt") -> Path:
    """BOOTFS as the owner typed it. On Windows a bare drive (``E:``, where Imager's
    bootfs appears) names that drive's current folder, not its top: it means ``E:\\``."""
    if windows and len(arg) == 2 and arg[0].isascii() and arg[0].isalpha() and arg[1] == ":":
        arg += "\\"
    return Path(arg)


def entry(boot: Path, name: str) -> Path | None:
    """``name`` at the top of the partition, whatever its case: FAT's names are
    case-insensitive, and some systems show an 8.3 name in capitals (CONFIG.TXT)."""
    exact = boot / name
    if exact.exists():
        return exact
    try:
        return next((p for p in boot.iterdir() if p.name.casefold() == name.casefold()), None)
    except OSError:
        return None


def check_partition(boot: Path) -> Path:
    """The boot partition's ``user-data``, or why this is not a card to prepare."""
    if not boot.is_dir():
        raise CardError(
            f"{boot}: not a directory (the mounted boot partition, e.g. "
            "/media/$USER/bootfs, /Volumes/bootfs or E:)"
        )
    if entry(boot, "config.txt") is None or entry(boot, "cmdline.txt") is None:
        raise CardError(
            f"{boot}: not a Raspberry Pi OS boot partition (no config.txt and cmdline.txt)"
        )
    user_data = entry(boot, "user-data")
    if user_data is None or not user_data.is_file():
        if entry(boot, "firstrun.sh") is not None or entry(boot, "meta-data") is None:
            raise CardError(
                f"{boot}: a bookworm card (no cloud-init user-data): the first boot cannot "
                "install there; boot it and run scripts/install-pi.sh over SSH "
                "(docs/how-to/raspberry-pi.md, 3b)"
            )
        raise CardError(f"{boot}: no user-data: write the card with Raspberry Pi Imager first")
    return user_data


def check_config(
    config: Path | None,
    models: Path | None,
    carried: Collection[str] = (),
    label: str | None = None,
) -> Any:
    """The config the Pi's daemon, serve and publish will read (the installer's default
    when None), by their rules and against the models going on the card (None: those the
    Pi will build, which need a graph): what the Pi would refuse 10-20 minutes into its
    first boot, refused here in one line. A credentials file must be one the card
    carries (``carried``: their paths on the Pi), or serve fails at every boot. ``label``:
    the config's name in messages (default: its path). Returns it parsed (a Config)."""
    from edge import config as config_mod

    text = config_mod.read_text(config) if config else config_mod.default_text()
    where = label or str(config or "the default config")
    try:
        parsed = config_mod.parse(text, where, parts=tuple(config_mod.SECTIONS))
        _check_credentials(parsed, text, carried)
        if parsed.model.dir:
            raise ConfigError(
                f"{config_mod.where(parsed.path, text, 'model', 'dir')} names a folder of "
                "this machine: on the Pi the daemon runs the card's models (leave it empty)"
            )
        if models is None:
            from edge import graphs

            graphs.cores_for(parsed, where)
        else:
            from edge.pipeline import check_models

            check_models(parsed, text, models)
    except ConfigError as exc:
        hint = " (`da3-edge card --view lan` brings a login)" if "serve.host" in str(exc) else ""
        raise CardError(f"{exc}{hint} (nothing written)") from None
    return parsed


def _check_credentials(parsed: Any, text: str, carried: Collection[str]) -> None:
    from edge import config as config_mod

    for key in ("token_file", "basic_auth_file"):
        value = getattr(parsed.serve, key)
        if value and value not in carried:
            raise ConfigError(
                f"{config_mod.where(parsed.path, text, 'serve', key)} names {value}, a file "
                "this card does not carry: serve would fail at every boot on the Pi (leave "
                "it empty; `--view lan` brings a login, and the config that uses it)"
            )


def lan_config(config: Path | None) -> str:
    """The config for the LAN view: ``config`` (else the installer's default) with
    ``[serve]`` listening beyond loopback, on the login the card carries."""
    import tomlkit

    from edge import config as config_mod

    doc = tomlkit.parse(config_mod.read_text(config) if config else config_mod.default_text())
    if "serve" not in doc:
        doc.add("serve", tomlkit.table())
    serve = doc["serve"]
    serve["host"] = "0.0.0.0"
    serve["port"] = LAN_PORT
    serve["basic_auth_file"] = LAN_LOGIN
    return tomlkit.dumps(doc)


def hostname(user_data: Path) -> str:
    """The Pi's host name as Imager set it (``hostname:``), else Pi OS's default."""
    import yaml

    try:
        data = yaml.safe_load(user_data.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        data = None
    name = data.get("hostname") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else "raspberrypi"


def check_no_links(bundle: Path) -> None:
    """FAT holds no symbolic links: one at or under the bundle's place is not the card's
    own, and card would delete and write through it, outside the partition."""
    links = [bundle] if bundle.is_symlink() else []
    if bundle.is_dir() and not links:
        links = [p for p in bundle.rglob("*") if p.is_symlink()]
    if links:
        raise CardError(
            f"{links[0]}: a symbolic link (a FAT card has none): remove it; nothing written"
        )


def check_not_booted(boot: Path, user_data: str) -> None:
    """A card whose first boot has run: cloud-init runs ``runcmd`` once per instance
    (Imager's meta-data instance-id), so a new bundle would never be installed."""
    ran = entry(boot, INSTALLED) is not None or (
        any(line.strip() == f"- {ENTRY_TEXT}" for line in user_data.splitlines())
        and entry(boot, BUNDLE) is None
    )
    if ran:
        raise CardError(
            f"{boot}: this card has booted already (da3-edge's first boot ran, and cloud-init "
            "runs it once): write it anew with Raspberry Pi Imager, or install on the running "
            "Pi over SSH (docs/how-to/raspberry-pi.md, 3b); nothing written"
        )


def merge_user_data(text: str, where: str) -> str | None:
    """``text`` with the first-boot entry added to its ``runcmd`` (None: there already).

    The entry goes in as text where the parse says ``runcmd`` ends; the result is
    parsed again and must be the original data plus the entry."""
    import yaml

    data, root = _parse_cloud_config(text, where)
    runcmd = data.get("runcmd")
    nl = "\r\n" if "\r\n" in text else "\n"
    if "runcmd" not in data:
        merged = text + ("" if text.endswith(("\n", "\r")) else nl)
        merged += f"{nl}# da3-edge: install at first boot (da3-edge card){nl}"
        merged += f"runcmd:{nl}- {ENTRY_TEXT}{nl}"
    elif not isinstance(runcmd, list):
        raise CardError(f"{where}: runcmd is not a list")
    elif ENTRY in runcmd:
        return None
    else:
        assert root is not None
        merged = _append_item(text, _runcmd_node(root, runcmd, where), nl)
    try:
        again = yaml.safe_load(merged)
    except yaml.YAMLError:
        again = None
    if again != {**data, "runcmd": [*(runcmd or []), ENTRY]}:
        raise CardError(f"{where}: cannot add the install step to its runcmd list safely")
    return merged


def _parse_cloud_config(text: str, where: str) -> tuple[dict[str, Any], Any]:
    """The user-data's keys and its YAML node tree (None for an empty document)."""
    import yaml

    lines = text.splitlines()
    if not lines or lines[0].rstrip() != "#cloud-config":
        raise CardError(f"{where}: not cloud-config (its first line is not #cloud-config)")
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CardError(f"{where}: cannot parse it: {at}{problem}") from None
    if data is None:
        data, root = {}, None
    if not isinstance(data, dict) or (root is not None and not isinstance(root, yaml.MappingNode)):
        raise CardError(f"{where}: cannot parse it: not a mapping of cloud-config keys")
    return data, root


def _runcmd_node(root: Any, runcmd: list[Any], where: str) -> Any:
    """The node of the ``runcmd`` list written under its key, where the entry can go;
    CardError when da3-edge is there in another form, or the list is written twice or
    elsewhere (an alias, a merge key)."""
    ours = [
        i
        for i, item in enumerate(runcmd)
        if FIRST_BOOT in str(item) or f"/boot/firmware/{BUNDLE}/scripts/install-pi.sh" in str(item)
    ]
    if ours:
        raise CardError(
            f"{where}: runcmd entry {ours[0] + 1} already runs da3-edge in another form: "
            "remove it and run da3-edge card again"
        )
    keys = [k for k, _ in root.value if getattr(k, "value", None) == "runcmd"]
    if len(keys) > 1:
        raise CardError(
            f"{where}: runcmd appears {len(keys)} times (cloud-init takes the last): keep one"
        )
    node = next((v for k, v in root.value if getattr(k, "value", None) == "runcmd"), None)
    if node is None or node.start_mark.index < _key_end(root, "runcmd"):
        # from a merge key (<<:) or an alias (*name): its items are written elsewhere
        raise CardError(
            f"{where}: its runcmd list is written elsewhere (an alias or a merge key): "
            f"write it out under runcmd:, or add `- {ENTRY_TEXT}` to it by hand"
        )
    return node


def _key_end(root: Any, key: str) -> int:
    """Where the (last) ``key`` of the mapping node ``root`` ends in the text."""
    marks = [k.end_mark.index for k, _ in root.value if getattr(k, "value", None) == key]
    return marks[-1] if marks else 1 << 62


def _append_item(text: str, node: Any, nl: str) -> str:
    """``text`` with ENTRY after the last item of the sequence ``node`` (PyYAML's)."""
    if node.flow_style:  # runcmd: [a, b] -- before the closing bracket
        close = text.rindex("]", 0, node.end_mark.index)
        return text[:close] + (", " if node.value else "") + ENTRY_TEXT + text[close:]
    last = node.value[-1].end_mark.index
    if text[last - 1] == "\n":
        at, lead = last, ""  # the item took its whole lines (a block scalar, a nested list)
    else:
        line_end = text.find("\n", last)  # after its line (which may end in a comment)
        at, lead = (len(text), nl) if line_end < 0 else (line_end + 1, "")
    item = f"{lead}{' ' * node.start_mark.column}- {ENTRY_TEXT}{nl}"
    return text[:at] + item + text[at:]


def bundle_name(rel: str) -> str:
    """Where a deployed file (``deploy.FILES``) goes on the card: as in the checkout,
    under the bundle, but first-boot.sh at its top (user-data's entry names it there)."""
    return f"{BUNDLE}/first-boot.sh" if rel == "scripts/pi/first-boot.sh" else f"{BUNDLE}/{rel}"


def _bundle_sources(models: Path | None, wheel: Path, config: Path | None) -> dict[str, Path]:
    """Each file of the bundle, relative to the boot partition -> where its bytes are
    (the deployed files from the package itself: a checkout's or an installed wheel's)."""
    tree = deploy.root()
    files = {bundle_name(rel): tree / rel for rel in deploy.FILES}
    files[f"{BUNDLE}/dist/{wheel.name}"] = wheel
    from edge.models import Manifest

    if models is not None:
        manifest = Manifest.load(models)
        files[f"{BUNDLE}/models/manifest.json"] = manifest.path
        for artifact in manifest.artifacts:
            files[f"{BUNDLE}/models/{artifact.file}"] = manifest.artifact_path(artifact)
    if config is not None:
        files[f"{BUNDLE}/da3-edge.toml"] = config
    return files


def same_bytes(a: Path, b: Path) -> bool:
    try:
        if a.stat().st_size != b.stat().st_size:
            return False
        with a.open("rb") as fa, b.open("rb") as fb:
            while True:
                x, y = fa.read(1 << 20), fb.read(1 << 20)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


def _walk(top: Path) -> Iterator[Path]:
    if top.is_dir():
        yield from (p for p in top.rglob("*") if p.is_file())


def plan(
    boot: Path,
    *,
    models: Path | None,
    wheel: Path,
    config: Path | None = None,
    extra: dict[str, Path] | None = None,
    bundle_models: bool = True,
) -> Plan:
    """Every check, nothing written: what ``apply`` would do, or CardError. ``extra``:
    more files for the bundle (SERVE_USERS, MODELS_URL), by their name in it;
    ``bundle_models`` False: ``models`` (checked against) stay off the card, the Pi
    fetches them (MODELS_URL)."""
    user_data = check_partition(boot)
    try:
        text = user_data.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CardError(f"{user_data}: cannot read it ({exc})") from None
    check_not_booted(boot, text)
    check_no_links(boot / BUNDLE)
    check_config(config, models, [LAN_LOGIN] if SERVE_USERS in (extra or {}) else [])
    result = Plan(boot, user_data_path=user_data, user_data=merge_user_data(text, str(user_data)))
    sources = _bundle_sources(models if bundle_models and models else None, wheel, config)
    sources.update({f"{BUNDLE}/{name}": path for name, path in (extra or {}).items()})
    for rel, src in sources.items():
        if not src.is_file():
            raise CardError(f"{src}: missing (needed on the card as {rel})")
        dest = boot / rel
        if not same_bytes(src, dest):
            result.files[rel] = src
    wanted = {boot / rel for rel in sources}
    result.stale = sorted(p for p in _walk(boot / BUNDLE) if p not in wanted)
    try:
        st = os.statvfs(boot)
    except OSError as exc:
        raise CardError(f"{boot}: cannot read its free space ({exc})") from None
    unit = max(st.f_frsize, 512)
    result.free_bytes = st.f_bavail * st.f_frsize
    result.need_bytes = SLACK_BYTES + sum(
        -(-src.stat().st_size // unit) * unit for src in result.files.values()
    )
    freed = sum((boot / rel).stat().st_size for rel in result.files if (boot / rel).is_file())
    freed += sum(p.stat().st_size for p in result.stale)
    if result.files and result.need_bytes > result.free_bytes + freed:
        raise CardError(
            f"{boot}: {result.free_bytes / 1e6:.1f} MB free, the bundle needs "
            f"{result.need_bytes / 1e6:.1f} MB: nothing written (fewer models, e.g. "
            "`da3-edge export --precision fp16`, or the models from a URL: `da3-edge models "
            "pack` them, serve the pack, and give --models URL --sha256 HEX)"
        )
    return result


def _write_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as inp:
        atomic.write_bytes(dest, lambda out: shutil.copyfileobj(inp, out, 1 << 20))


def _write_text(dest: Path, text: str) -> None:
    atomic.write_bytes(dest, text.encode("utf-8"))


def apply(p: Plan, progress: Callable[[str], None]) -> None:
    """Write what ``plan`` found different: the bundle first, user-data last (a card
    whose copy stopped half-way does not run an install from half a bundle)."""
    total = sum(src.stat().st_size for src in p.files.values())
    done = 0
    for path in p.stale:
        path.unlink()
        progress(f"removed {path.relative_to(p.boot)}")
    for rel, src in p.files.items():
        size = src.stat().st_size
        try:
            _write_copy(src, p.boot / rel)
        except OSError as exc:
            raise CardError(f"{p.boot / rel}: cannot write it ({exc.strerror or exc})") from None
        done += size
        if size >= 1 << 20:
            progress(
                f"copied {rel} ({size / 1e6:.1f} MB; {done / 1e6:.0f} of {total / 1e6:.0f} MB)"
            )
    if p.files:
        progress(f"bundle: {len(p.files)} files written ({total / 1e6:.1f} MB)")
    if p.user_data is not None:
        _write_text(p.user_data_path, p.user_data)
        progress(f"user-data: runcmd runs {FIRST_BOOT} at first boot")
    if hasattr(os, "sync"):
        os.sync()
