"""Options several commands share, declared once: the same flag, words and checks.

Each ``add_*`` takes where the default comes from: a command with a config file (`run`)
names the config key the flag overrides; the others say their own default.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from edge.config import flag_help
from edge.errors import UsageError
from edge.models import LONGEST_SIDE, PRECISIONS, check_size
from edge.stages import CHOICES

STAGES = CHOICES

MODELS_DEFAULT = "$DA3_EDGE_MODELS, else ~/.local/share/da3-edge/models"


def add_models(p: argparse.ArgumentParser, *, config_key: str | None = None) -> None:
    p.add_argument(
        "--models",
        metavar="DIR",
        help=flag_help(config_key)
        if config_key
        else f"model directory (default: {MODELS_DEFAULT})",
    )


def add_precision(
    p: argparse.ArgumentParser, *, default: str | None = None, config_key: str | None = None
) -> None:
    _add_choice(p, "--precision", PRECISIONS, "core model precision", default, config_key)


def size(text: str) -> int:
    """``--size``'s type: a core size (models.check_size), or argparse's one-line error."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number, e.g. 280") from None
    try:
        return check_size(number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


SIZE_HELP = (
    f"the core's long side, a multiple of 14 ({LONGEST_SIDE}, DA3's own, is the most "
    "accurate; smaller is faster: see docs/performance.md); uses the models exported at "
    "that size (`da3-edge export --size N`)"
)


def add_size(p: argparse.ArgumentParser, *, config_key: str | None = None) -> None:
    default = f"{LONGEST_SIDE} when exported, else the only size there is"
    p.add_argument(
        "--size",
        type=size,
        metavar="N",
        help=flag_help(config_key) if config_key else f"{SIZE_HELP} (default: {default})",
    )


def add_stages(
    p: argparse.ArgumentParser, *, default: str | None = None, config_key: str | None = None
) -> None:
    """``default`` only describes where the backend comes from (stages.load decides)."""
    what = (
        "pre/post-processing backend; auto: executorch where its runner and the model's "
        "programs are installed, else numpy"
    )
    _add_choice(p, "--stages", STAGES, what, None, config_key, default)


def add_weight_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--weight-cache",
        default="auto",
        metavar="DIR|auto|off",
        help="XNNPACK's packed-weight cache: auto (default: ~/.cache/da3-edge/xnnpack, or "
        "$DA3_EDGE_CACHE/xnnpack), a directory, or off. Built once per model by a child "
        "process; not used with fp16 arithmetic",
    )


def _add_choice(
    p: argparse.ArgumentParser,
    flag: str,
    choices: Sequence[str],
    what: str,
    default: str | None,
    config_key: str | None,
    described: str | None = None,
) -> None:
    help = flag_help(config_key) if config_key else f"{what} (default: {described or default})"
    p.add_argument(flag, default=default, choices=choices, help=help)


def split_sizes(value: str) -> list[int]:
    """``--size LIST`` (comma-separated core sizes), each checked as ``--size N`` is, in
    order, without repeats; UsageError naming the bad item."""
    sizes: list[int] = []
    for item in (part.strip() for part in value.split(",")):
        try:
            number = size(item)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--size: {exc}") from None
        if number not in sizes:
            sizes.append(number)
    return sizes


def split_list(value: str, allowed: Sequence[str], what: str) -> list[str]:
    """A comma-separated flag value, each item checked against ``allowed`` (an empty
    item too: ``--precision ''`` must not mean none), in order, without repeats;
    UsageError naming the bad item."""
    items: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if item not in allowed:
            raise UsageError(f"unknown {what} {item!r} (choose from {', '.join(allowed)})")
        if item not in items:
            items.append(item)
    return items


def add_store_and_config(p: argparse.ArgumentParser, *, sections: str) -> None:
    """The companions' (serve, publish) way to find the daemon's config and store."""
    p.add_argument(
        "--config", metavar="FILE", help=f"the daemon's TOML config ({sections}, [store])"
    )
    p.add_argument("--store", metavar="DIR", help=flag_help("store.dir"))
