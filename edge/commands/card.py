"""``da3-edge card``: make a card Raspberry Pi Imager wrote install da3-edge at first boot.

The work is in ``edge.card``: every check before the first byte is written, then only
what differs. See docs/how-to/raspberry-pi.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from edge import card
from edge.commands import models as models_command
from edge.errors import CardError, EdgeError


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
    p.add_argument("bootfs", metavar="BOOTFS", help="the mounted boot partition")
    p.add_argument(
        "--models",
        metavar="DIR|URL",
        required=True,
        help="model directory to install (checked as `da3-edge models --verify` does), or "
        "the URL of a pack (`da3-edge models pack`) the Pi fetches at first boot: then only "
        "the URL goes on the card, and the pack is fetched here once to check it",
    )
    p.add_argument(
        "--sha256",
        metavar="HEX",
        help="with --models URL: the pack's SHA-256 (`da3-edge models pack` prints it)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="the daemon's config for the Pi (checked first; default: the installer's)",
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


def _models(ns: argparse.Namespace, tmp: Path) -> tuple[Path, str | None]:
    """The model folder to check the card against, and the URL line for the bundle
    (None: the models go on the card). A URL's pack is fetched into ``tmp`` once."""
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


def _wheel(ns: argparse.Namespace, tmp: Path) -> Path:
    if not ns.wheel:
        from edge import deploy

        return deploy.own_wheel(tmp)
    wheel = Path(ns.wheel)
    if wheel.suffix != ".whl" or not wheel.name.startswith("da3_edge-") or not wheel.is_file():
        raise CardError(f"--wheel {wheel}: not a da3_edge-*.whl file")
    return wheel


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    boot = Path(ns.bootfs)
    card.check_partition(boot)  # the cheap refusals before the models are loaded
    with tempfile.TemporaryDirectory(prefix="da3-edge-card-") as name:
        tmp = Path(name)
        models, url = _models(ns, tmp)
        _verify_models(models)
        config = Path(ns.config) if ns.config else None
        card.check_config(config, models)  # file:line: section.key, before a wheel is built
        wheel = _wheel(ns, tmp)
        extra, password = {}, None
        if url is not None:
            extra[card.MODELS_URL] = tmp / card.MODELS_URL
            extra[card.MODELS_URL].write_text(url)
        if ns.view == "lan":
            config, extra[card.SERVE_USERS], password = _lan(boot, config, tmp)
        todo = card.plan(
            boot, models=models, wheel=wheel, config=config,
            extra=extra, bundle_models=url is None,
        )  # fmt: skip
        if not todo.changes:
            print(f"{boot}: ready already, nothing changed")
        else:
            card.apply(todo, lambda line: print(line, file=sys.stderr, flush=True))
            print(
                f"{boot}: ready; at first boot the Pi installs da3-edge ({wheel.name}) and "
                "starts it"
            )
    if ns.view == "lan":
        _say_lan(boot, password)
    return 0
