"""edge.passwords: made on the laptop, stored as a salted hash, checked by serve."""

from __future__ import annotations

import base64
import time
from pathlib import Path

from edge import passwords
from edge.passwords import Verifier
from edge.serve.auth import Credentials
from scripts.support.serve import serving


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


def test_a_hashed_login_runs_the_kdf_once_per_credential() -> None:
    creds = Credentials(basic=b"viewer:" + passwords.hashed("correct horse").encode())
    good = b"Basic " + base64.b64encode(b"viewer:correct horse")
    assert creds.quick(good) is None  # not yet checked: the KDF must run
    start = time.perf_counter()
    assert creds.allows(good)
    first = time.perf_counter() - start
    assert creds.quick(good) is True  # from memory now
    for wrong in (b"viewer:wrong", b"other:correct horse", b"nocolon"):
        header = b"Basic " + base64.b64encode(wrong)
        assert not creds.allows(header) and creds.quick(header) is None  # not remembered
    print(f"scrypt check {first * 1000:.0f} ms")
    assert Verifier(b"viewer:pa55").check(b"viewer:pa55")
    assert not Verifier(b"viewer:pa55").check(b"viewer:x")


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
