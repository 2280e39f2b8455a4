"""`da3-edge serve` as a real process over a store the real daemon writes.

HTTP through the standard library's client against serve's real uvicorn; the daemon
runs on the fake camera, with FakeCores (scripts/support/fakedaemon.py) where the model is
not the subject, and once with the small exported model (`python -m edge run`).
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from scripts.support import children
from scripts.support.daemon import daemon, frame_dirs, write_config
from scripts.support.serve import Serve, serving
from scripts.support.tools import require_tool

SCENE: dict[str, dict[str, object]] = {
    "store": {"formats": ["png", "npz", "preview", "json", "rgb"]}  # with the scene
}


def test_the_newest_frame_its_files_and_its_status(small_models: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with (
        daemon(tmp_path, store, small_models) as d,
        serving(["--store", str(store)], tmp_path / "serve.log") as s,
    ):
        d.wait_for(lambda: len(frame_dirs(store)) >= 2, what="two frames")
        code, headers, body = s.get("/latest.json")
        assert code == 200 and headers["cache-control"] == "no-store"
        record = json.loads(body)
        store_id = (store / "store-id").read_text().strip()
        assert headers["etag"] == f'"{store_id}-{record["store_seq"]}"'
        assert record["random_init"] is True and "not metres" in record["depth"]["kind"]
        # The default store.size: the outputs at the core's resolution, the camera's beside.
        out = tuple(record["output_size"])
        assert out == tuple(record["shape_used"]) and record["source_size"] == [240, 320]
        code, _, _ = s.get("/latest.json", {"If-None-Match": headers["etag"]})
        assert code in (200, 304)  # 200 only if a newer frame came in between
        for path, check in (
            ("/latest.png", lambda b: Image.open(io.BytesIO(b)).mode.startswith("I;16")),
            ("/latest.preview.png", lambda b: Image.open(io.BytesIO(b)).format == "PNG"),
            ("/latest.jpg", lambda b: Image.open(io.BytesIO(b)).format == "JPEG"),
            ("/latest.npz", lambda b: np.load(io.BytesIO(b))["depth"].shape == out),
        ):
            code, headers, body = s.get(path)
            assert code == 200 and check(body), path
            assert headers["etag"].startswith(f'"{store_id}-') and "x-frame-seq" in headers
        code, _, body = s.get("/api/status")
        status = json.loads(body)
        assert code == 200 and status["format"] == 1 and status["state"] == "running"
        assert status["store"]["id"] == store_id
        code, _, body = s.get("/healthz")
        assert code == 200 and body.startswith(b"ok: frame "), body
        assert s.get("/nothing")[0] == 404
        assert s.get("/latest.json/../../etc/passwd")[0] == 404
        assert s.get("/%2e%2e/%2e%2e/etc/passwd")[0] == 404
        code, _, _ = s.get("/latest.json", {"If-None-Match": 'W/"garbage, "x'})  # malformed
        assert code == 200
        code, _, body = s.get("/latest.npz", {"Range": "bytes=oops-"})  # ignored, whole file
        assert code == 200 and np.load(io.BytesIO(body))["depth"].shape == out
        assert d.stop() == 0
    assert "Traceback" not in s.log, s.log


def test_events_follow_the_store_frame_by_frame(fake_models: Path, tmp_path: Path) -> None:
    """/events: one event per written frame, in order, numbers as in the store."""
    store = tmp_path / "store"
    with (
        daemon(tmp_path, store, fake_models) as d,
        serving(["--store", str(store)], tmp_path / "serve.log") as s,
    ):
        d.wait_for(lambda: frame_dirs(store), what="a frame")
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
        conn.request("GET", "/events")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("content-type", "").startswith(
            "text/event-stream"
        )
        seqs: list[int] = []
        ids: list[str] = []
        while len(seqs) < 5:
            line = resp.readline().decode().rstrip("\n")
            if line.startswith("data: "):
                seqs.append(json.loads(line[6:])["store_seq"])
            elif line.startswith("id: "):
                ids.append(line[4:])
        conn.close()
        assert d.stop() == 0
    print("events for frames", seqs)
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    # The daemon writes every frame it computes; serve saw each one (none skipped).
    assert seqs == list(range(seqs[0], seqs[0] + 5)), seqs
    store_id = (store / "store-id").read_text().strip()
    assert ids == [f"{store_id}-{n}" for n in seqs]


def test_healthz_follows_the_daemon_down_and_up(fake_models: Path, tmp_path: Path) -> None:
    """Over HTTP, as the daemon starts, stops and starts again (each verdict's reasons:
    ``test_health_names_what_is_wrong``)."""
    store = tmp_path / "store"
    cfg = write_config(
        tmp_path / "c.toml", "fake:fps:20", store, fake_models, serve={"max_age": 2.0}
    )
    with serving(["--config", str(cfg)], tmp_path / "serve.log") as s:
        code, _, body = s.get("/healthz")
        assert code == 503 and b"daemon not running" in body
        with daemon(tmp_path, store, fake_models) as d:
            d.wait_for(lambda: s.get("/healthz")[0] == 200, what="healthy")
            assert d.stop() == 0
        code, _, body = s.get("/healthz")
        assert code == 503 and b"daemon stopped" in body, body
        with daemon(tmp_path, store, fake_models) as d:
            d.wait_for(lambda: s.get("/healthz")[0] == 200, what="healthy again")
            assert d.stop() == 0


def test_an_empty_or_missing_store_says_so_on_every_endpoint(tmp_path: Path) -> None:
    with serving(["--store", str(tmp_path / "none")], tmp_path / "serve.log") as s:
        for path in ("/latest.json", "/latest.png", "/latest.jpg", "/latest.npz", "/api/status"):
            code, headers, body = s.get(path)
            assert code == 503 and headers["retry-after"] == "1", path
            assert b"no store at" in body or b"daemon has not run" in body, body
        code, _, body = s.get("/healthz")
        assert code == 503 and b"daemon not running" in body
    (tmp_path / "empty" / "frames").mkdir(parents=True)
    with serving(["--store", str(tmp_path / "empty")], tmp_path / "serve2.log") as s:
        code, _, body = s.get("/latest.json")
        assert code == 503 and body == b"no frame in the store yet\n"
        # Half-rotated: `latest` points at a frame already pruned.
        (tmp_path / "empty" / "latest").symlink_to("frames/0000000005")
        for path in ("/latest.json", "/latest.png", "/latest.jpg", "/stream.mjpg"):
            code, _, body = s.get(path)
            assert code == 503 and b"the newest frame is gone" in body, (path, body)
        assert s.get("/metrics")[0] == 200
    assert "Traceback" not in s.log


def test_another_address_needs_credentials_and_they_are_checked(tmp_path: Path) -> None:
    from scripts.support.tools import run_main

    proc = run_main(["serve", "--host", "0.0.0.0", "--port", "0", "--store", str(tmp_path)])
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "da3-edge: error: config: serve.host is 0.0.0.0, beyond this machine: it needs "
        "serve.basic_auth_file or serve.token_file (a file only serve's user can read), or use "
        "127.0.0.1"
    ]
    token = tmp_path / "token"
    token.write_text("kQ3v_Zf8-Lw2Rt9yXa7Mn4Pb6Hc1Jd0Es5Ug\n")
    token.chmod(0o644)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[serve]\ntoken_file = "{token}"\n')
    proc = run_main(
        [
            "serve",
            "--config",
            str(cfg),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--store",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 1 and "can be read by others (mode 644); chmod 600" in proc.stderr
    token.chmod(0o600)
    users = tmp_path / "users"
    users.write_text("viewer:Vq7-Tz2_hRw9Lp4-Xe6Nm3Jd\n")
    users.chmod(0o600)
    cfg.write_text(f'[serve]\ntoken_file = "{token}"\nbasic_auth_file = "{users}"\n')
    with serving(
        ["--config", str(cfg), "--host", "0.0.0.0", "--store", str(tmp_path)],
        tmp_path / "serve.log",
    ) as s:
        code, headers, _ = s.get("/healthz")
        assert code == 401 and headers["www-authenticate"] == 'Basic realm="da3-edge"'
        assert s.get("/healthz", {"Authorization": "Bearer wrong"})[0] == 401
        assert (
            s.get("/healthz", {"Authorization": "Bearer kQ3v_Zf8-Lw2Rt9yXa7Mn4Pb6Hc1Jd0Es5Ug"})[0]
            == 503
        )  # no daemon
        basic = base64.b64encode(b"viewer:Vq7-Tz2_hRw9Lp4-Xe6Nm3Jd").decode()
        assert s.get("/healthz", {"Authorization": f"Basic {basic}"})[0] == 503
        assert s.get("/healthz", {"Authorization": "Basic !!notbase64"})[0] == 401
        assert "(credentials required)" in s.log


def test_serve_imports_no_numpy_and_no_litert() -> None:
    proc = children.run("serve-imports")
    assert proc.stdout.strip() == "[]", proc.stderr


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_bad_port_is_one_line(port: str, tmp_path: Path) -> None:
    from scripts.support.tools import run_main

    proc = run_main(["serve", "--port", port, "--store", str(tmp_path)])
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith("da3-edge serve: ")
    assert "must be 0 (any free port) to 65535 (config serve.port)" in proc.stderr


def test_metrics_parse_and_pass_promtool(fake_models: Path, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    store = tmp_path / "store"
    with (
        daemon(tmp_path, store, fake_models) as d,
        serving(["--store", str(store)], tmp_path / "serve.log") as s,
    ):
        d.wait_for(lambda: len(frame_dirs(store)) >= 3, what="three frames")
        time.sleep(1.0)  # status.json refreshed (status_every 0.5 s)
        code, headers, body = s.get("/metrics")
        assert d.stop() == 0
    assert code == 200 and headers["content-type"].startswith("text/plain")
    text = body.decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for f in families.values()
        for x in f.samples
    }
    print({k: v for k, v in samples.items() if "bucket" not in k[0]})
    assert samples[("da3edge_daemon_up", ())] == 1.0
    assert samples[("da3edge_frames_written_total", ())] >= 3
    assert (
        samples[("da3edge_frames_captured_total", ())]
        >= samples[("da3edge_frames_written_total", ())]
    )
    assert ("da3edge_frames_dropped_total", (("reason", "stale"),)) in samples
    assert samples[("da3edge_frames_failed_total", (("stage", "core"),))] == 0
    assert samples[("da3edge_end_to_end_latency_seconds_count", ())] >= 1
    assert samples[("da3edge_inference_seconds_count", ())] >= 1
    assert (
        samples[("da3edge_store_bytes", ())] > 0 and samples[("da3edge_store_free_bytes", ())] > 0
    )
    info = [k for k in samples if k[0] == "da3edge_build_info"]
    assert info and dict(info[0][1])["random_init"] == "true"
    assert abs(samples[("da3edge_last_frame_timestamp_seconds", ())] - time.time()) < 60
    # Not spaced for heat (no sensor here, or one under the default 75 °C target).
    assert samples[("da3edge_thermal_duty", ())] == 1.0
    assert samples[("da3edge_thermal_interval_seconds", ())] == 0.0
    promtool = require_tool("promtool", ".ci/run installs it: requirements/apt.txt")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def mjpeg_parts(port: int, view: str, count: int) -> list[bytes]:
    """The first ``count`` parts of /stream.mjpg?view=VIEW, each checked whole."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("GET", f"/stream.mjpg?view={view}")
    resp = conn.getresponse()
    media = resp.getheader("content-type", "")
    boundary = media.split("boundary=")[1].encode()
    assert media.startswith("multipart/x-mixed-replace") and resp.status == 200
    assert resp.readline() == b"--" + boundary + b"\r\n"
    images: list[bytes] = []
    while len(images) < count:
        headers = {}
        while (line := resp.readline()) != b"\r\n":
            key, _, value = line.decode().partition(":")
            headers[key.lower()] = value.strip()
        assert headers["content-type"] == "image/jpeg"
        data = resp.read(int(headers["content-length"]))
        assert resp.readline() == b"\r\n" and resp.readline() == b"--" + boundary + b"\r\n"
        images.append(data)
    conn.close()
    return images


def test_mjpeg_stream_parts_are_whole_jpegs_of_new_frames_in_each_view(
    fake_models: Path, tmp_path: Path
) -> None:
    """A daemon that writes the scene too ("rgb" in store.formats): frame.rgb.jpg in each
    frame, /latest.rgb.jpg, and each view of the stream whole JPEGs of new frames, the
    side-by-side one as wide as the scene and the depth together."""
    store = tmp_path / "store"
    with (
        daemon(tmp_path, store, fake_models, **SCENE) as d,
        serving(["--store", str(store)], tmp_path / "serve.log") as s,
    ):
        d.wait_for(lambda: frame_dirs(store), what="a frame")
        assert (frame_dirs(store)[-1] / "frame.rgb.jpg").is_file()
        w, h = outputs_wh(store)
        code, headers, scene = s.get("/latest.rgb.jpg")
        assert code == 200 and headers["content-type"] == "image/jpeg"
        with Image.open(io.BytesIO(scene)) as im:
            assert im.format == "JPEG" and im.size == (w, h)  # the outputs' size
        views = {view: mjpeg_parts(s.port, view, 3) for view in ("depth", "rgb", "side")}
        code, _, body = s.get("/stream.mjpg?view=both")
        assert code == 400 and body == b"view must be one of depth, rgb, side\n"
        assert d.stop() == 0
    sizes = {"depth": (w, h), "rgb": (w, h), "side": (2 * w, h)}
    for view, images in views.items():
        for data in images:
            with Image.open(io.BytesIO(data)) as im:
                assert im.format == "JPEG" and im.size == sizes[view], (view, im.size)
        assert len(set(images)) >= 2, view  # the fake camera's frames differ
    # The scene is the camera's picture, not the colour map: their pixels differ.
    with (
        Image.open(io.BytesIO(views["rgb"][0])) as a,
        Image.open(io.BytesIO(views["depth"][0])) as b,
    ):
        diff = np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).mean()
    print(f"scene vs depth preview: mean |difference| {diff:.1f} levels")
    assert diff > 20


def outputs_wh(store: Path) -> tuple[int, int]:
    """(W, H) of the newest frame's outputs, from its record."""
    h, w = json.loads((frame_dirs(store)[-1] / "frame.json").read_text())["output_size"]
    return w, h


def test_the_live_page_in_a_real_browser(fake_models: Path, tmp_path: Path) -> None:
    """Debian's chromium, driven by Playwright: the preview changes with the frames,
    the page reads the frame number, says relative and random-init; a screenshot is
    kept (.cache/tests/artifacts/serve-page.png)."""
    from playwright.sync_api import sync_playwright

    from scripts.support.models import cache_dir

    chromium = require_tool("chromium", ".ci/run installs it: requirements/apt.txt")
    store = tmp_path / "store"
    with (
        daemon(tmp_path, store, fake_models, **SCENE) as d,
        serving(["--store", str(store)], tmp_path / "serve.log") as s,
        sync_playwright() as pw,
    ):
        d.wait_for(lambda: frame_dirs(store), what="a frame")
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 412, "height": 915})  # a phone
            page.goto(f"http://127.0.0.1:{s.port}/")
            seen = _previews_change(page, time.monotonic() + 30)
            assert re.match(r"\d+ \(camera \d+\)", seen[-1][0]), seen
            assert "not metres" in page.inner_text(".legend")
            assert page.is_visible("#random")  # the test model is random-init
            end = time.monotonic() + 30
            while page.inner_text("#fps") == "-" and time.monotonic() < end:
                time.sleep(0.1)
            assert page.inner_text("#camera") == "ok" and page.inner_text("#daemon") == "running"
            age = float(page.inner_text("#age").removesuffix(" s"))
            assert 0 <= age < 5, age
            _the_view_switch(page, time.monotonic() + 60, outputs_wh(store))
            shot = cache_dir() / "artifacts" / "serve-page.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
        assert d.stop() == 0
    print(f"{len(seen)} states seen, screenshot {shot}")
    with Image.open(shot) as im:
        assert im.size[0] == 412


def _previews_change(page: Any, end: float) -> list[tuple[str, str]]:
    """The (frame number, preview URL) states the page goes through, until the preview
    has changed three times; polled from here: the page's CSP (rightly) forbids the
    eval that Playwright's wait_for_function would run in it."""
    seen: list[tuple[str, str]] = []
    while len({src for _, src in seen}) < 4 and time.monotonic() < end:
        loaded = page.eval_on_selector("#preview", "e => e.complete && e.naturalWidth > 0")
        if not loaded:
            time.sleep(0.05)
            continue
        seq = page.inner_text("#seq")
        src = page.eval_on_selector("#preview", "e => e.src")
        if not seen or seen[-1] != (seq, src):
            seen.append((seq, src))
        time.sleep(0.1)
    assert len({src for _, src in seen}) >= 4, seen  # the first and 3 changes
    return seen


def _the_view_switch(page: Any, end: float, wh: tuple[int, int]) -> None:
    """The scene, then both side by side: each view's image is its own."""
    views = {}
    for view in ("depth", "rgb", "side"):
        page.click(f"#view-{view}")
        while time.monotonic() < end:
            src = page.eval_on_selector("#preview", "e => e.src")
            size = page.eval_on_selector(
                "#preview", "e => e.complete ? [e.naturalWidth, e.naturalHeight] : null"
            )
            if f"view={view}" in src and size and size[0] > 0:
                break
            time.sleep(0.05)
        views[view] = (size, page.locator("#preview").screenshot())
        assert page.get_attribute(f"#view-{view}", "aria-pressed") == "true"
        assert page.is_hidden("#scale") is (view == "rgb")  # no depth colours
    print("views:", {v: size for v, (size, _) in views.items()})
    assert views["depth"][0] == views["rgb"][0] == list(wh)
    assert views["side"][0] == [2 * wh[0], wh[1]]  # the scene and the depth, side by side
    assert views["rgb"][1] != views["depth"][1] != views["side"][1]


def test_sigterm_with_a_stream_open_exits_promptly(tmp_path: Path) -> None:
    """A browser holding /events open must not keep serve from stopping (systemd would
    wait TimeoutStopSec, then kill it)."""
    root = tmp_path / "store"
    (root / "frames" / "0000000000").mkdir(parents=True)
    (root / "frames" / "0000000000" / "frame.json").write_text('{"store_seq": 0}')
    (root / "latest").symlink_to("frames/0000000000")
    s = Serve(["--store", str(root)], tmp_path / "serve.log")
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    conn.request("GET", "/events")
    assert conn.getresponse().status == 200
    t0 = time.monotonic()
    code = s.stop()
    took = time.monotonic() - t0
    conn.close()
    print(f"stopped in {took:.2f} s with a stream open")
    assert code == 0 and took < 5, s.log


def health_of(root: Path, status: dict[str, Any] | None, *, max_age: float = 2.0) -> str:
    """serve's health verdict over ``root`` with ``status`` as its status.json."""
    from edge.serve.app import health
    from edge.serve.hub import Hub
    from edge.store import layout

    if status is not None:
        (root / layout.STATUS).write_text(json.dumps(status))
    ok, why = health(Hub(root, clients=1), max_age=max_age, status_every=1.0)
    assert ok == why.startswith("ok: "), why
    return why


def test_health_names_what_is_wrong(tmp_path: Path) -> None:
    """Each branch of /healthz's verdict, on a store written by hand: no daemon, a
    stopped one, one no longer reporting, no frame yet, a stale frame (a hung camera or
    core), and healthy."""
    from scripts.support.store import store

    root = tmp_path / "empty"
    root.mkdir()
    assert health_of(root, None).startswith("daemon not running: no status.json in ")
    assert health_of(root, {"state": "stopped"}) == "daemon stopped"
    now = time.time()
    running = {
        "state": "running",
        "updated_at_unix": now,
        "camera": {"state": "ok"},
        "store": {"state": "ok"},
    }
    stale = {**running, "updated_at_unix": now - 10}  # 3 x status_every + 2 = 5 s
    assert health_of(root, stale) == "daemon not reporting: status.json older than 5 s"
    assert health_of(root, running) == ("no frame yet (serve.max_age 2 s); camera ok, store ok")
    root = store(tmp_path, seq=7)  # one frame, written now
    assert health_of(root, running).startswith("ok: frame 7, ")
    # A reload (a new model loading for seconds) keeps the old one writing frames: healthy
    # while they come, said as such.
    reloading = {**running, "state": "reloading"}
    assert health_of(root, reloading).startswith("ok: frame 7, ")
    assert health_of(root, reloading).endswith(" old; reloading")
    record = root / "frames" / "0000000007" / "frame.json"
    record.write_text(json.dumps({"store_seq": 7, "t_written": now - 9}))
    hung = {**running, "camera": {"state": "stalled", "reason": "no frame for 8 s"}}
    assert health_of(root, hung).startswith("newest frame 9.")
    assert health_of(root, hung).endswith(
        "s old (serve.max_age 2 s); camera stalled (no frame for 8 s), store ok"
    )
    # A frame stamped an hour ahead (a clock set back since, or a forged record) is no
    # proof of a working daemon; nor is a status.json from the future.
    record.write_text(json.dumps({"store_seq": 7, "t_written": now + 3600}))
    assert health_of(root, running).startswith("newest frame stamped 3600 s in the future")
    ahead = {**running, "updated_at_unix": now + 3600}
    assert health_of(root, ahead).startswith("daemon not reporting")
