"""The live page's 3D view in Debian's chromium (WebGL on SwiftShader, driven by
Playwright), over a store the daemon's FrameStore wrote: a board turned 30 degrees in
front of a wall (scripts/support/scene.py), served by a real `da3-edge serve`."""

from __future__ import annotations

import io
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from edge.fov import FieldOfView
from scripts.support.models import cache_dir
from scripts.support.scene import board_and_wall
from scripts.support.serve import serving
from scripts.support.store import board_store, write_board
from scripts.support.tools import require_tool

# WebGL without a GPU: chromium's ANGLE on SwiftShader, its CPU renderer.
CHROMIUM_ARGS = ["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"]
SEEN = FieldOfView(66.0, "config camera.hfov")
FORMATS = ("npz", "json", "rgb", "preview")


def _drawn(page: Any, frame: int, end: float) -> None:
    """Until the canvas says it drew ``frame`` (its data-frame), by ``end``."""
    while time.monotonic() < end:
        if page.get_attribute("#cloud", "data-frame") == str(frame):
            return
        time.sleep(0.05)
    raise AssertionError(f"frame {frame} not drawn: {page.inner_text('#noview')!r}")


def _look(page: Any, port: int, view: str) -> np.ndarray:
    """The canvas (RGB) after opening the page at ``#3d,VIEW`` (an orbit from the URL)."""
    page.goto(f"http://127.0.0.1:{port}/#3d{view}")
    page.reload()  # a new hash alone does not load the page again
    _drawn(page, 0, time.monotonic() + 30)
    shot = page.locator("#cloud").screenshot()
    with Image.open(io.BytesIO(shot)) as image:
        return np.asarray(image.convert("RGB")).astype(np.int16)


def _masks(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The board's pixels (green) and the wall's (grey) in a screenshot."""
    green = (rgb[..., 1] > 150) & (rgb[..., 0] < 100)
    grey = (np.abs(rgb[..., 0] - 150) < 25) & (np.abs(rgb[..., 2] - 160) < 25) & ~green
    return green, grey


def _axis(mask: np.ndarray) -> float:
    """The angle in degrees (0: across the screen, positive: rising to the right) of
    the principal axis of a mask's pixels."""
    rows, cols = np.nonzero(mask)
    points = np.stack([cols, -rows], axis=1).astype(np.float64)
    _, _, vt = np.linalg.svd(points - points.mean(axis=0), full_matrices=False)
    angle = math.degrees(math.atan2(vt[0][1], vt[0][0]))
    return (angle + 90) % 180 - 90


def test_the_3d_view_shows_a_board_in_front_of_a_wall(tmp_path: Path) -> None:
    """From where the camera stood the board fills the middle with the wall around it;
    from above, the wall is a line across and the board a line turned 30 degrees in
    front of it; a drag turns the view and the wheel zooms; new frames are drawn as
    they come. A screenshot is kept (.cache/tests/artifacts/page-3d.png)."""
    from playwright.sync_api import sync_playwright

    chromium = require_tool("chromium", ".ci/run installs it: requirements/apt.txt")
    store = board_store(tmp_path / "store", SEEN, FORMATS)
    with (
        serving(["--store", str(store.root)], tmp_path / "serve.log") as s,
        sync_playwright() as pw,
    ):
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 412, "height": 915})  # a phone
            _front_and_top(page, s.port)
            _orbit(page)
            costs = _follows(page, store)
            page.goto(f"http://127.0.0.1:{s.port}/#3d,yaw=40,pitch=20,dist=9")
            page.reload()
            _drawn(page, 5, time.monotonic() + 30)
            shot = cache_dir() / "artifacts" / "page-3d.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    print(f"update a frame (fetch, parse, draw): {costs} ms; screenshot {shot}")


def _front_and_top(page: Any, port: int) -> None:
    front = _look(page, port, "")
    green, grey = _masks(front)
    h, w = green.shape
    board = board_and_wall((120, 160), 66.0, tilt=30.0).board.mean()
    print(f"front: board {green.mean():.3f} of the canvas (the scene's {board:.3f})")
    assert green[h // 2, w // 2] and grey[h // 20, w // 20] and grey[-h // 20, -w // 20]
    assert abs(green.mean() - board) < 0.05
    top = _look(page, port, ",pitch=89,dist=14")
    green, grey = _masks(top)
    # The board's points, in front of (below) the wall's line: the wall keeps a few
    # green pixels of the picture at the board's edge.
    wall_row = int(np.nonzero(grey)[0].max())
    green[: wall_row + 1] = False
    board_angle, wall_angle = _axis(green), _axis(grey)
    print(
        f"top: board at {board_angle:.1f} degrees ({green.sum()} pixels), wall at {wall_angle:.1f}"
    )
    assert green.sum() > 200 and abs(board_angle - 30.0) < 3.0 and abs(wall_angle) < 2.0


def _orbit(page: Any) -> None:
    """A mouse drag turns the view; the wheel zooms."""
    box = page.locator("#cloud").bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    before = float(page.get_attribute("#cloud", "data-yaw"))
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 100, y, steps=5)
    page.mouse.up()
    assert float(page.get_attribute("#cloud", "data-yaw")) == before + 40.0
    dist = float(page.get_attribute("#cloud", "data-dist"))
    page.mouse.wheel(0, 500)
    end = time.monotonic() + 10
    while float(page.get_attribute("#cloud", "data-dist")) == dist and time.monotonic() < end:
        time.sleep(0.05)
    assert float(page.get_attribute("#cloud", "data-dist")) > dist  # scrolled down: away
    # Two fingers spread apart (pointer events as a phone's browser sends them): nearer.
    dist = float(page.get_attribute("#cloud", "data-dist"))
    fingers = {11: x - 50, 12: x + 50}
    for finger, at in fingers.items():
        page.dispatch_event("#cloud", "pointerdown", _touch(finger, at, y))
    for at in (x + 100, x + 150):
        page.dispatch_event("#cloud", "pointermove", _touch(12, at, y))
    for finger in fingers:
        page.dispatch_event("#cloud", "pointerup", _touch(finger, x, y))
    pinched = float(page.get_attribute("#cloud", "data-dist"))
    assert pinched == pytest.approx(dist * 150 / 200, rel=1e-3), (dist, pinched)


def _touch(finger: int, x: float, y: float) -> dict[str, Any]:
    return {
        "pointerId": finger,
        "pointerType": "touch",
        "clientX": x,
        "clientY": y,
        "isPrimary": finger == 11,
        "bubbles": True,
    }


def _follows(page: Any, store: Any) -> list[float]:
    """Frames written at the core's default size (378x504) are drawn as they come:
    each one's update time, fetch to drawn (ms, the canvas's data-update-ms)."""
    costs = []
    for n in range(1, 6):
        write_board(store, SEEN, n, size=(378, 504))
        _drawn(page, n, time.monotonic() + 30)
        costs.append(float(page.get_attribute("#cloud", "data-update-ms")))
    assert page.get_attribute("#cloud", "data-points") == str(378 * 504)
    return costs
