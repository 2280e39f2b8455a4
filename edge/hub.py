"""DA3-small's release from the Hugging Face hub: ``da3-edge models fetch``.

Two files from ``{endpoint}/{repo}/resolve/{revision}/``: ``config.json`` (small, checked
as a release config) and ``model.safetensors`` (137 MB, an LFS file). For the weights the
hub answers the resolve URL with a redirect to its file host and two headers: the file's
SHA-256 (``X-Linked-Etag``) and size (``X-Linked-Size``). The SHA-256 checked is the one
given with ``--sha256`` (a digest pinned in a card's config), else the hub's; the size is
capped (``MAX_WEIGHTS``) and the free space checked before the first byte is written. The download
goes to a hidden partial beside the target, resumed (HTTP Range) when run again, and is
renamed into place only once its SHA-256 matches; a mismatch, an oversize answer or a full
disk removes the partial. ``HF_ENDPOINT`` names another endpoint, as huggingface_hub
reads it. Standard library only.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from edge import packs
from edge.errors import PackError, printable
from edge.models import (
    CONFIG_FILE,
    HUB_REPO,
    MODEL_NAME,
    WEIGHTS_FILE,
    resolve_weights_file,
    sha256_file,
)

ENDPOINT = "https://huggingface.co"
MAX_CONFIG = 64 << 10  # bytes: the release's config.json is 26
MAX_WEIGHTS = 512 << 20  # bytes: the release's model.safetensors is 137,248,940

Say = Callable[[str], None]


def default_dir() -> Path:
    """Where the release goes: beside the models, under the XDG data home."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(data_home) / "da3-edge" / "release"


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or ENDPOINT).rstrip("/")


class _Stay(urllib.request.HTTPRedirectHandler):
    """Redirects not followed: the hub's headers are on the redirect itself."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _head(url: str) -> tuple[str, dict[str, str]]:
    """Where ``url`` leads (its redirect, or itself) and the headers of its answer."""
    opener = urllib.request.build_opener(_Stay)
    request = urllib.request.Request(url, method="HEAD")
    try:
        with opener.open(request, timeout=packs.TIMEOUT_S) as response:
            return url, {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as exc:
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
        if exc.code in (301, 302, 303, 307, 308) and "location" in headers:
            return urllib.parse.urljoin(url, headers["location"]), headers
        raise PackError(
            f"{url}: the hub answered {exc.code} {printable(str(exc.reason))}"
        ) from None
    except (OSError, ValueError) as exc:
        raise PackError(f"{url}: cannot reach the hub ({packs.why(exc)})") from None


def _expected(headers: dict[str, str], url: str, pinned: str | None) -> tuple[str, int]:
    """The weights' SHA-256 (pinned, else the hub's) and size (the hub's)."""
    etag = headers.get("x-linked-etag", "").removeprefix("W/").strip('"').lower()
    size = headers.get("x-linked-size") or headers.get("content-length") or ""
    want = (pinned or etag).lower()
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        raise PackError(
            f"{url}: the hub gave no SHA-256 for {WEIGHTS_FILE} (X-Linked-Etag "
            f"{printable(etag) or 'missing'}): pass --sha256 HEX"
        )
    if not size.isdigit():
        raise PackError(f"{url}: the hub gave no size for {WEIGHTS_FILE}")
    return want, int(size)


def fetch(
    out: Path,
    say: Say,
    *,
    repo: str = HUB_REPO,
    revision: str = "main",
    sha256: str | None = None,
) -> Path:
    """The release folder ``out`` (config.json + model.safetensors), fetched and checked;
    a file already there with the expected SHA-256 is kept. Returns the weights file."""
    out.mkdir(parents=True, exist_ok=True)
    base = f"{endpoint()}/{repo}/resolve/{urllib.parse.quote(revision)}"
    _fetch_config(f"{base}/{CONFIG_FILE}", out / CONFIG_FILE)
    url = f"{base}/{WEIGHTS_FILE}"
    source, headers = _head(url)
    want, size = _expected(headers, url, sha256)
    if size > MAX_WEIGHTS:
        raise PackError(
            f"{url}: {size / 1e6:.0f} MB, over the {MAX_WEIGHTS >> 20} MiB any {MODEL_NAME} "
            "release could be: not downloaded"
        )
    target = out / WEIGHTS_FILE
    if target.is_file() and sha256_file(target) == want:
        say(f"download: not needed: {target} has SHA-256 {want[:12]}...")
        return resolve_weights_file(out)
    part = out / f".{WEIGHTS_FILE}.part"
    meter = packs.Meter(f"download {WEIGHTS_FILE}", say)
    packs.download(source, want, part, meter, limit=size, what="release file")
    os.replace(part, target)
    say(f"download: {target} ({size / 1e6:.1f} MB, SHA-256 {want[:12]}... ok)")
    return resolve_weights_file(out)


def _fetch_config(url: str, target: Path) -> None:
    """config.json: small (a plain git file on the hub, no SHA-256 of its own), read
    whole, checked to be DA3-small's, written atomically."""
    try:
        with packs.open_url(url) as response:
            data = response.read(MAX_CONFIG + 1)
    except urllib.error.HTTPError as exc:
        raise PackError(
            f"{url}: the hub answered {exc.code} {printable(str(exc.reason))}"
        ) from None
    except (OSError, ValueError) as exc:
        raise PackError(f"{url}: cannot download it ({packs.why(exc)})") from None
    if len(data) > MAX_CONFIG:
        raise PackError(f"{url}: over {MAX_CONFIG >> 10} kB: not a release config")
    try:
        name = json.loads(data.decode("utf-8")).get("model_name")
    except (UnicodeDecodeError, ValueError, AttributeError):
        raise PackError(f"{url}: not a release config (no JSON object)") from None
    if name != MODEL_NAME:
        raise PackError(f"{url}: model_name is {printable(str(name))!r}, not {MODEL_NAME!r}")
    from edge import atomic

    atomic.write_bytes(target, data)
