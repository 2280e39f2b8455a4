"""edge.passwords: made on the laptop, stored as a salted hash, checked by serve."""

from __future__ import annotations

import base64
import time
from pathlib import Path

from edge import passwords
from edge.passwords import Verifier

from .support.serve import serving


def test_a_hash_matches_its_password_only() -> None:
    password = passwords.new_password()
    assert len(password) == 24  # 144 bits, URL-safe
    stored = passwords.hashed(password).encode()
    assert stored.startswith(b"scrypt$16384$8$1$")
    assert passwords.matches(password.encode(), stored)
    assert not passwords.matches(password.encode() + b"x", stored)
    assert passwords.hashed(password) != stored.decode()  # a new salt each time
    for broken in (b"scrypt$", b"scrypt$1$8$1$AA$AA", b"scrypt$16384$8$1$!!$!!", b"md5$x"):
        assert not passwords.matches(password.encode(), broken)


def test_the_verifier_runs_the_kdf_once_per_credential() -> None:
    line = b"viewer:" + passwords.hashed("correct horse").encode()
    verifier = Verifier(line)
    assert verifier.known(b"viewer:correct horse") is None  # not yet checked
    start = time.perf_counter()
    assert verifier.check(b"viewer:correct horse")
    first = time.perf_counter() - start
    assert verifier.known(b"viewer:correct horse") is True
    assert not verifier.check(b"viewer:wrong") and not verifier.check(b"other:correct horse")
    assert verifier.known(b"viewer:wrong") is None  # failures are not remembered
    print(f"scrypt check {first * 1000:.0f} ms")
    plain = Verifier(b"viewer:pa55")
    assert plain.known(b"viewer:pa55") is True and plain.known(b"viewer:x") is False


def test_serve_takes_the_hashed_form(tmp_path: Path) -> None:
    password = passwords.new_password()
    users = tmp_path / "users"
    users.write_text(f"viewer:{passwords.hashed(password)}\n")
    users.chmod(0o600)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[serve]\nbasic_auth_file = "{users}"\n')
    with serving(
        ["--config", str(cfg), "--host", "0.0.0.0", "--store", str(tmp_path)],
        tmp_path / "serve.log",
    ) as s:

        def get(credential: str | None) -> int:
            if credential is None:
                return s.get("/healthz")[0]
            basic = base64.b64encode(credential.encode()).decode()
            return s.get("/healthz", {"Authorization": f"Basic {basic}"})[0]

        assert get(None) == 401
        assert get("viewer:wrong") == 401
        assert get(f"viewer:{password}") == 503  # let in (no daemon: not healthy)
        assert get(f"viewer:{password}") == 503  # again, from the verifier's memory
