"""``da3-edge card``: make a card Raspberry Pi Imager wrote install da3-edge at first boot.

The work is in ``edge.card``: every check before the first byte is written, then only
what differs. See docs/how-to/raspberry-pi.md.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edge import card
from edge.commands import models as models_command
from edge.errors import CardError, EdgeError, first_line


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge card",
        description="Prepare the boot partition of a Raspberry Pi OS (trixie) card that "
        "Raspberry Pi Imager wrote: copy the installer, a wheel, the models and a config "
        f"into {card.BUNDLE}/ there, and add one runcmd entry to Imager's user-data "
        "(every key Imager wrote stays). At first boot cloud-init installs da3-edge as a "
        "service, then the bundle is removed; a failed install leaves "
        "da3-edge-install-failed.txt on the partition. Checks everything before writing "
        "anything; a second run changes nothing. Run from a da3-edge checkout.",
    )
    p.add_argument(
        "bootfs",
        metavar="BOOTFS",
        help="the mounted boot partition (/media/$USER/bootfs on Linux, /Volumes/bootfs on macOS, "
        "its drive on Windows, e.g. E:)",
    )
    _model_options(p)
    p.add_argument(
        "--config",
        metavar="FILE",
        help="the daemon's config for the Pi (checked first; default: the installer's)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config key for the Pi, over --config's (or the default's), as `da3-edge "
        "config set` takes it; repeat for more (e.g. --set camera.fps=5 --set model.size=392)",
    )
    p.add_argument(
        "--wheel",
        metavar="FILE",
        help="the da3-edge wheel to install (default: this da3-edge, built from its checkout "
        "or packed from its installed files)",
    )
    p.add_argument(
        "--view",
        choices=("local", "lan"),
        default="local",
        help="where the live page answers: local (the Pi itself; reach it with an SSH "
        "tunnel) or lan (a phone or laptop on the same network: a password is made here "
        "and printed once, and only its salted hash goes on the card) (default: local)",
    )
    return p


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--models",
        metavar="DIR|URL",
        help="model directory to install (checked as `da3-edge models --verify` does), or "
        "the URL of a pack (`da3-edge models pack`) the Pi fetches at first boot: then only "
        "the URL goes on the card, and the pack is fetched here once to check it (default: "
        "none; the Pi builds the models the config needs from DA3's release file at first "
        "boot, fetched from the Hugging Face hub, or from --weights)",
    )
    p.add_argument(
        "--weights",
        metavar="DIR",
        help="without --models: DA3's release folder (config.json + model.safetensors, "
        "137 MB) to carry on the card, for a Pi that builds its models with no download",
    )
    p.add_argument(
        "--weights-sha256",
        metavar="HEX",
        help="without --models or --weights: the release file's SHA-256 the Pi checks "
        "its download against (default: the hub's own)",
    )
    p.add_argument(
        "--hub",
        metavar="URL",
        help="without --models or --weights: the hub the Pi downloads the release from "
        "(a mirror; default: https://huggingface.co)",
    )
    p.add_argument(
        "--sha256",
        metavar="HEX",
        help="with --models URL: the pack's SHA-256 (`da3-edge models pack` prints it)",
    )


def _lan(boot: Path, config: Path | None, tmp: Path) -> tuple[Path, Path, str | None]:
    """The LAN view's config and login for the bundle, and the new password (None: the
    card holds a login made by an earlier run, kept)."""
    from edge import passwords

    users, password = tmp / card.SERVE_USERS, None
    made = boot / card.BUNDLE / card.SERVE_USERS
    if made.is_file():
        users.write_bytes(made.read_bytes())
    else:
        password = passwords.new_password()
        users.write_text(f"{card.LAN_USER}:{passwords.hashed(password)}\n")
    lan = tmp / "da3-edge.toml"
    lan.write_text(card.lan_config(config))
    return lan, users, password


def _say_lan(boot: Path, password: str | None) -> None:
    name = card.hostname(card.check_partition(boot))
    print(
        f"The live page, from a phone or laptop on the same network once the Pi is up:\n"
        f"  http://{name}.local:{card.LAN_PORT}/  (or http://ADDRESS:{card.LAN_PORT}/: the "
        f"address your router lists for {name}, or `hostname -I` on the Pi)"
    )
    if password is None:
        print(f"  user {card.LAN_USER}, with the password printed when this card was first made")
        return
    print(f"  user {card.LAN_USER}, password {password}")
    print("Keep the password now: it is shown once, and the card holds only its hash.")


def _verify_models(directory: Path) -> None:
    from edge.models import Manifest

    manifest = Manifest.load(directory)
    for artifact in [*manifest.cores(), *manifest.stage_programs()]:
        try:
            models_command.check(manifest, artifact)
        except EdgeError as exc:
            raise CardError(f"--models {directory}: {exc}") from None


def _build(ns: argparse.Namespace, tmp: Path) -> dict[str, Path]:
    """No models on the card: what tells the Pi to build them, by name in the bundle
    (MODELS_BUILD: "hub SHA256 ENDPOINT", "-" for either default; or the RELEASE files)."""
    if ns.weights:
        if ns.weights_sha256 or ns.hub:
            raise CardError(
                "--weights carries the release: --weights-sha256 and --hub go without it"
            )
        from edge.release import CONFIG_FILE, resolve_weights_file

        try:
            weights = resolve_weights_file(ns.weights)
        except EdgeError as exc:
            raise CardError(f"--weights: {exc}") from None
        extra = {f"{card.RELEASE}/{weights.name}": weights}
        if (weights.parent / CONFIG_FILE).is_file():
            extra[f"{card.RELEASE}/{CONFIG_FILE}"] = weights.parent / CONFIG_FILE
        return extra
    sha = (ns.weights_sha256 or "-").lower()
    if sha != "-" and not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise CardError(f"--weights-sha256 {ns.weights_sha256}: not 64 hex digits")
    hub = ns.hub or "-"
    if hub != "-" and not re.fullmatch(r"https?://[^\s]+", hub):
        raise CardError(f"--hub {ns.hub}: not an http(s) URL")
    (tmp / card.MODELS_BUILD).write_text(f"hub {sha} {hub.rstrip('/')}\n")
    return {card.MODELS_BUILD: tmp / card.MODELS_BUILD}


def _check_release(weights: Path, config: Any, where: str) -> None:
    """The release the card carries has every tensor the build of ``config`` (a Config,
    named ``where``) will read on the Pi, of the network's shape and dtype (its header;
    the values are read on the Pi)."""
    from edge import corebuild, graphs
    from edge.release import Release

    shapes, precisions = graphs.cores_for(config, where)
    try:
        with Release(weights) as release:
            for template in (corebuild.find(s, p) for s in shapes for p in precisions):
                for name, shape in template.tensors.items():
                    release.info(name, shape)
    except EdgeError as exc:
        raise CardError(f"--weights: {exc} (nothing written)") from None


def _models(ns: argparse.Namespace, tmp: Path) -> tuple[Path, str | None]:
    """The model folder to check the card against, and the URL line for the bundle
    (None: the models go on the card). A URL's pack is fetched into ``tmp`` once."""
    if ns.weights or ns.weights_sha256 or ns.hub:
        raise CardError(
            "--models brings the models: --weights, --weights-sha256 and --hub go without it"
        )
    if "://" not in ns.models:
        if ns.sha256:
            raise CardError("--sha256 goes with --models URL (a pack's address)")
        return Path(ns.models), None
    if not ns.sha256:
        raise CardError("--models URL needs --sha256 HEX (the pack's, as `models pack` prints)")
    from edge import packs

    meter = packs.Meter("models: download", lambda line: print(line, file=sys.stderr, flush=True))
    folder = tmp / "models"
    packs.pull(ns.models, ns.sha256, folder, meter)
    return folder, f"{ns.models} {ns.sha256.lower()}\n"


def _with_settings(config: Path | None, settings: list[str], tmp: Path) -> Path:
    """``config`` (else the installer's default) with each ``KEY=VALUE`` set, as a file
    in ``tmp``; each refused in one line naming it (the whole file is checked after)."""
    from edge import config as config_mod
    from edge.commands import config as config_command

    text = config_mod.read_text(config) if config else config_mod.default_text()
    for item in settings:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise CardError(f"--set {item}: give KEY=VALUE, e.g. --set camera.fps=5")
        try:  # the key's type here; the values' rules with the whole config, after
            text, _ = config_command.with_key(text, "--set", key.strip(), raw)
            config_mod.parse(text, "--set", parts=())
        except EdgeError as exc:
            why = re.sub(r"^--set(:\d+)?: ", "", first_line(exc))
            raise CardError(f"--set {item}: {why} (nothing written)") from None
    path = tmp / "settings.toml"
    path.write_text(text)
    return path


def _wheel(ns: argparse.Namespace, tmp: Path) -> Path:
    if not ns.wheel:
        from edge import deploy

        return deploy.own_wheel(tmp)
    wheel = Path(ns.wheel)
    if wheel.suffix != ".whl" or not wheel.name.startswith("da3_edge-") or not wheel.is_file():
        raise CardError(f"--wheel {wheel}: not a da3_edge-*.whl file")
    return wheel


def _no_login_in_urls(ns: argparse.Namespace) -> None:
    """A URL for the Pi goes on the card and into the first boot's log, both readable:
    one that carries a login would hand it out."""
    import urllib.parse

    for flag, url in (("--models", ns.models), ("--hub", ns.hub)):
        if url and "://" in url and "@" in urllib.parse.urlsplit(url).netloc:
            raise CardError(
                f"{flag}: the URL carries a login, which would be readable on the card and in "
                "the Pi's first-boot log: serve the pack where no login is needed (its "
                "SHA-256 is checked)"
            )


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    boot = card.partition(ns.bootfs)
    _no_login_in_urls(ns)
    card.check_partition(boot)  # the cheap refusals before the models are loaded
    with tempfile.TemporaryDirectory(prefix="da3-edge-card-") as name:
        tmp = Path(name)
        models, url, extra = None, None, {}
        if ns.models:
            models, url = _models(ns, tmp)
            _verify_models(models)
        else:
            extra = _build(ns, tmp)
        config = Path(ns.config) if ns.config else None
        if ns.set:
            config = _with_settings(config, ns.set, tmp)
        password, carried = None, []
        if ns.view == "lan":  # checked as the Pi will read it: listening, with the login
            config, extra[card.SERVE_USERS], password = _lan(boot, config, tmp)
            carried = [card.LAN_LOGIN]
        label = f"{ns.config or 'the default config'} with --set" if ns.set else None
        parsed = card.check_config(config, models, carried, label)  # file:line: key, first
        if ns.weights:
            _check_release(Path(ns.weights), parsed, label or str(config or "the default config"))
        wheel = _wheel(ns, tmp)
        if url is not None:
            extra[card.MODELS_URL] = tmp / card.MODELS_URL
            extra[card.MODELS_URL].write_text(url)
        todo = card.plan(
            boot,
            models=models,
            wheel=wheel,
            config=config,
            extra=extra,
            bundle_models=url is None,
        )
        if not todo.changes:
            print(f"{boot}: ready already, nothing changed")
        else:
            card.apply(todo, lambda line: print(line, file=sys.stderr, flush=True))
            built = (
                ""
                if models
                else ", builds its models from DA3's release"
                + (" on the card" if ns.weights else " (downloaded: 137 MB)")
            )
            print(
                f"{boot}: ready; at first boot the Pi installs da3-edge ({wheel.name}){built} "
                "and starts it"
            )
    if ns.view == "lan":
        _say_lan(boot, password)
    return 0
