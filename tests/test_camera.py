"""Camera specs (`--source`) and the fake camera's fault-script language, the words the
operator, the demos, the daemon tests and the systemd container all use."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from PIL import Image

from edge.camera import open_source
from edge.camera.base import CLOSE_GRACE
from edge.camera.fake import FakeCamera, Step, parse_script
from edge.camera.opencv import OpenCVSource
from edge.camera.picamera2 import Picamera2Source, sensor
from edge.camera.replay import ReplaySource
from edge.errors import CameraError, CameraTimeout, CameraWedged, UsageError
from scripts.support import ROOT


def test_script_steps_with_counts_and_values() -> None:
    assert parse_script("ok*20, error*3,timeout,hang:60,freeze*2,openfail*4,fps:2.5,end") == [
        Step("ok", 20),
        Step("error", 3),
        Step("timeout", 1),
        Step("hang", 1, 60.0),
        Step("freeze", 2),
        Step("openfail", 4),
        Step("fps", 1, 2.5),
        Step("end", 1),
    ]
    assert parse_script("") == []


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("explode", "unknown step"),
        ("ok*x", "'x' is not a count"),
        ("ok*0", "count must be at least 1"),
        ("hang", "needs a number, e.g. hang:5"),
        ("fps:0", "must be a positive number"),
        ("fps:nan", "must be a positive number"),
        ("hang:inf", "must be a positive number"),
        ("error:3", "takes no ':' argument"),
    ],
)
def test_bad_script_steps_are_named(script: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse_script(script)
    assert repr(script) in str(caught.value)


def test_the_fake_plays_its_script_then_good_frames() -> None:
    with FakeCamera("ok*2,error,freeze,timeout", width=8, height=6, fps=1000) as cam:
        a, b = cam.read(1.0), cam.read(1.0)
        assert a.rgb.shape == (6, 8, 3) and a.rgb.dtype == np.uint8
        assert (a.seq, b.seq) == (0, 1) and not np.array_equal(a.rgb, b.rgb)
        with pytest.raises(CameraError, match="scripted"):
            cam.read(1.0)
        frozen = cam.read(1.0)
        assert frozen is b  # same pixels, same timestamps: a frozen sensor
        with pytest.raises(CameraTimeout):
            cam.read(0.01)
        assert cam.read(1.0).seq == 2  # then good frames for ever


def test_openfail_fails_opens_and_end_is_for_good() -> None:
    cam = FakeCamera("openfail*2,ok,end", fps=1000)
    for _ in range(2):
        with pytest.raises(CameraError, match="open failed"):
            cam.open()
    cam.open()
    assert cam.opens == 3
    cam.read(1.0)
    for _ in range(3):
        with pytest.raises(CameraError, match="gone"):
            cam.read(1.0)
    cam.close()


def test_fps_paces_reads() -> None:
    import time

    with FakeCamera("fps:50", fps=1000) as cam:
        start = time.monotonic()
        for _ in range(6):
            cam.read(1.0)
        assert time.monotonic() - start >= 5 / 50 * 0.9


def test_specs_open_the_named_source(tmp_path: Path) -> None:
    assert isinstance(open_source("fake:ok*2", width=16, height=8, timeout=2.0), FakeCamera)
    replay = open_source(f"replay:{tmp_path}@2.5:once", width=1280, height=720, timeout=2.0)
    assert isinstance(replay, ReplaySource)
    assert (replay.path, replay.fps, replay.loop) == (tmp_path, 2.5, False)
    again = open_source(f"replay:{tmp_path}", width=1280, height=720, timeout=2.0)
    assert isinstance(again, ReplaySource) and again.fps == 5.0
    # picamera2[:INDEX]: libcamera's camera number, kept (it was dropped: camera 0 always).
    for spec, index in (("picamera2", 0), ("picamera2:1", 1), ("opencv:2", 2)):
        source = open_source(spec, width=1280, height=720, timeout=2.0)
        assert isinstance(source, Picamera2Source | OpenCVSource) and source.index == index


def test_a_picamera2_index_libcamera_does_not_report_is_one_line() -> None:
    """The cameras as picamera2's global_camera_info() lists them (a Pi 5 with a Camera
    Module 3 on one connector)."""
    from edge.camera.picamera2 import check_index

    cameras = [
        {
            "Model": "imx708_wide",
            "Location": 2,
            "Rotation": 180,
            "Num": 0,
            "Id": "/base/axi/pcie@120000/rp1/i2c@88000/imx708@1a",
        }
    ]
    check_index(0, cameras)
    with pytest.raises(CameraError) as refused:
        check_index(1, cameras)
    assert str(refused.value) == (
        "picamera2: no camera 1; libcamera reports 0: imx708_wide (`rpicam-hello "
        "--list-cameras`; a camera connected or reseated since boot needs a reboot)"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("webcam", "unknown source 'webcam'"),
        ("replay:", "replay needs a path"),
        ("replay:/x@fast", "replay fps 'fast' is not a number"),
        ("replay:/x@0", "replay fps must be a positive number"),
        ("replay:/x@nan", "replay fps must be a positive number"),
        ("opencv:front", "opencv camera index 'front' is not a number"),
        ("picamera2:back", "picamera2 camera index 'back' is not a number"),
        ("picamera2:-1", "picamera2 camera index '-1' is not a number"),
        ("fake:ok*0", "count must be at least 1"),
    ],
)
def test_bad_specs_are_usage_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        open_source(spec, width=1280, height=720, timeout=2.0)


def test_replay_plays_a_directory_in_name_order_and_ends_once(tmp_path: Path) -> None:
    for name, value in (("b.png", 200), ("a.png", 100)):
        Image.new("RGB", (4, 3), (value, 0, 0)).save(tmp_path / name)
    with open_source(f"replay:{tmp_path}@1000:once", width=1280, height=720, timeout=2.0) as cam:
        first, second = cam.read(1.0), cam.read(1.0)
        assert (first.rgb[0, 0, 0], second.rgb[0, 0, 0]) == (100, 200)
        with pytest.raises(CameraError, match="end of images"):
            cam.read(1.0)
    with pytest.raises(CameraError, match="does not exist"):
        ReplaySource(tmp_path / "missing").open()


def _rgb_to_yuv(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full-range BT.601 (JPEG's), the inverse of what the picamera2 source applies."""
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
    v = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
    return tuple(np.clip(np.round(c), 0, 255).astype(np.uint8) for c in (y, u, v))  # type: ignore[return-value]


def _smooth_rgb(h: int, w: int) -> np.ndarray:
    """Colour that is constant over each 2x2 block (so 4:2:0 chroma loses nothing)."""
    yy, xx = np.mgrid[0 : h // 2, 0 : w // 2]
    small = np.stack([xx * 255 // (w // 2), yy * 255 // (h // 2), 255 - xx * 255 // (w // 2)], -1)
    return np.repeat(np.repeat(small, 2, 0), 2, 1).astype(np.uint8)


def test_picamera2_formats_convert_to_rgb() -> None:
    """What libcamera negotiates reaches the pipeline as RGB: packed formats by their
    memory order, NV12 and YUV420 through BT.601; anything else is named."""
    from edge.camera.formats import to_rgb_for

    h, w = 6, 8
    rgb = _smooth_rgb(h, w)
    bgr_in_memory = rgb[..., ::-1]
    assert np.array_equal(to_rgb_for("RGB888", (w, h))(bgr_in_memory), rgb)
    assert np.array_equal(to_rgb_for("BGR888", (w, h))(rgb), rgb)
    xbgr = np.concatenate([rgb, np.full((h, w, 1), 255, np.uint8)], -1)  # R, G, B, X
    assert np.array_equal(to_rgb_for("XBGR8888", (w, h))(xbgr), rgb)
    y, u, v = _rgb_to_yuv(rgb)
    u2, v2 = u[::2, ::2], v[::2, ::2]
    uv = np.stack([u2, v2], -1).reshape(h // 2, w)  # interleaved U, V
    nv12 = np.concatenate([y, uv])
    back = to_rgb_for("NV12", (w, h))(nv12)
    assert back.shape == (h, w, 3) and back.dtype == np.uint8
    assert np.abs(back.astype(int) - rgb).max() <= 2
    # A stride wider than the image is cut away.
    padded = np.pad(nv12, ((0, 0), (0, 8)))
    assert np.array_equal(to_rgb_for("NV12", (w, h))(padded), back)
    i420 = np.concatenate([y, np.concatenate([u2.ravel(), v2.ravel()]).reshape(h // 2, w)])
    assert np.array_equal(to_rgb_for("YUV420", (w, h))(i420), back)
    with pytest.raises(CameraError, match="delivers YUYV, which da3-edge cannot convert"):
        to_rgb_for("YUYV", (w, h))


def test_yuv_in_the_colour_space_libcamera_chose() -> None:
    """Limited-range Rec709 (picamera2's video default) decodes as such, not as JPEG's
    full-range BT.601; the colour space is read from libcamera's ColorSpace."""
    from edge.camera.formats import to_rgb_for, yuv_encoding

    h, w = 6, 8
    rgb = _smooth_rgb(h, w).astype(np.float64)
    kr, kb = 0.2126, 0.0722
    y = kr * rgb[..., 0] + (1 - kr - kb) * rgb[..., 1] + kb * rgb[..., 2]
    cb = (rgb[..., 2] - y) / (2 * (1 - kb))
    cr = (rgb[..., 0] - y) / (2 * (1 - kr))
    limited = [16 + y * 219 / 255, 128 + cb * 224 / 255, 128 + cr * 224 / 255]
    y8, u8, v8 = (np.round(c).clip(0, 255).astype(np.uint8) for c in limited)
    nv12 = np.concatenate([y8, np.stack([u8[::2, ::2], v8[::2, ::2]], -1).reshape(h // 2, w)])
    rec709 = _FakeLibcamera.ColorSpace("Rec709", "Limited")
    assert yuv_encoding(rec709) == ("Rec709", False)
    back = to_rgb_for("NV12", (w, h), yuv_encoding(rec709))(nv12)
    wrong = to_rgb_for("NV12", (w, h))(nv12)
    err, err_wrong = (np.abs(x.astype(int) - rgb).max() for x in (back, wrong))
    print(f"Rec709 limited decoded as such: max error {err}; as sYCC: {err_wrong}")
    assert err <= 2 and err_wrong > 10
    assert yuv_encoding(None) == yuv_encoding(_FakeLibcamera.ColorSpace.Sycc()) == ("Rec601", True)


class _FakeLibcamera:
    """The parts of libcamera's Python bindings the source uses, as picamera2 sees them."""

    class Transform:
        def __init__(self, hflip: int = 0, vflip: int = 0) -> None:
            self.hflip, self.vflip = hflip, vflip

    class controls:
        class AfModeEnum:
            Manual, Auto, Continuous = 0, 1, 2

    class ColorSpace:
        """Its attributes as libcamera's bindings give them (enums with a ``name``)."""

        def __init__(self, encoding: str, range_: str) -> None:
            self.ycbcrEncoding = types.SimpleNamespace(name=encoding)
            self.range = types.SimpleNamespace(name=range_)

        @classmethod
        def Sycc(cls) -> _FakeLibcamera.ColorSpace:
            return cls("Rec601", "Full")


class _FakeRequest:
    converted = 0  # make_array calls
    crop: ClassVar[tuple[int, int, int, int]] = (0, 0, 4608, 2592)  # ScalerCrop: all of it
    streams: ClassVar[list[str]] = []  # the streams asked of make_array, in order

    def __init__(self, ns: int, lores: tuple[int, int] | None = None) -> None:
        self.ns, self.lores = ns, lores

    def make_array(self, stream: str) -> np.ndarray:
        _FakeRequest.converted += 1
        _FakeRequest.streams.append(stream)
        if stream == "lores":  # YUV420 (I420) at the lores size: mid grey
            assert self.lores is not None, "lores asked of a request without one"
            w, h = self.lores
            return np.full((h * 3 // 2, w), 128, np.uint8)
        return np.zeros((48, 64, 3), np.uint8)

    def get_metadata(self) -> dict[str, object]:
        return {"SensorTimestamp": self.ns, "LensPosition": 0.5, "ScalerCrop": self.crop}

    def release(self) -> None:
        pass


class _FakePicamera2:
    """A Camera Module 3 as picamera2 presents it: camera_controls keyed by libcamera's
    control names (min, max, default), a configuration read back after configure."""

    made: ClassVar[list[_FakePicamera2]] = []
    flips = True  # whether the sensor honours a transform
    period_ns = 200_000_000  # the sensor's frame period, whatever FrameDurationLimits says
    lores_fails = False  # whether configure refuses a second stream

    def __init__(self, num: int = 0) -> None:
        self.camera_controls = {
            "AfMode": (0, 2, 0),
            "LensPosition": (0.0, 15.0, 1.0),
            "FrameDurationLimits": (33333, 120000, 33333),
            "AfTrigger": (0, 1, 0),
        }
        self.camera_properties = {
            "Model": "imx708",
            "PixelArraySize": (4608, 2592),
            "PixelArrayActiveAreas": [(0, 0, 4608, 2592)],
        }
        self.ns = 0
        _FakePicamera2.made.append(self)

    @staticmethod
    def global_camera_info() -> list[dict[str, object]]:
        return [{"Model": "imx708", "Num": 0}]

    def create_video_configuration(self, **kw: Any) -> dict[str, Any]:
        self.asked: dict[str, Any] = kw
        return kw

    def configure(self, config: dict[str, object]) -> None:
        if config.get("lores") and self.lores_fails:
            raise RuntimeError("Failed to configure camera")
        self.config = config

    def camera_configuration(self) -> dict[str, object]:
        asked = self.config["transform"]
        transform = asked if self.flips else _FakeLibcamera.Transform()
        out = {
            "main": {"format": "RGB888", "size": (64, 48)},
            "transform": transform,
            "colour_space": self.config["colour_space"],
        }
        lores = self.config.get("lores")
        if isinstance(lores, dict):
            out["lores"] = {"format": lores["format"], "size": lores["size"]}
        return out

    def start(self) -> None:
        pass

    def capture_request(self, wait: float) -> _FakeRequest:
        self.ns += self.period_ns
        lores = self.config.get("lores")
        return _FakeRequest(self.ns, lores["size"] if isinstance(lores, dict) else None)

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def fake_picamera2(monkeypatch: pytest.MonkeyPatch) -> type[_FakePicamera2]:

    module = types.ModuleType("picamera2")
    module.Picamera2 = _FakePicamera2  # type: ignore[attr-defined]
    lib = types.ModuleType("libcamera")
    lib.Transform = _FakeLibcamera.Transform  # type: ignore[attr-defined]
    lib.controls = _FakeLibcamera.controls  # type: ignore[attr-defined]
    lib.ColorSpace = _FakeLibcamera.ColorSpace  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "picamera2", module)
    monkeypatch.setitem(sys.modules, "libcamera", lib)
    _FakePicamera2.made.clear()
    _FakePicamera2.flips = True
    _FakePicamera2.period_ns = 200_000_000
    _FakePicamera2.lores_fails = False
    _FakeRequest.converted = 0
    _FakeRequest.streams = []
    _FakeRequest.crop = (0, 0, 4608, 2592)
    return _FakePicamera2


def test_picamera2_frames_carry_the_modules_field_of_view(
    fake_picamera2: type[_FakePicamera2],
) -> None:
    """A Camera Module 3 (imx708) over its whole width: its published 66 degrees; the
    ISP's crop to 4:3 (ScalerCrop 3456 of 4608 wide): narrower, and said so."""
    with open_source("picamera2", width=64, height=48, timeout=2.0) as source:
        whole = source.read(1.0).fov
        _FakeRequest.crop = (576, 0, 3456, 2592)
        cropped = source.read(1.0).fov
    assert whole is not None and whole.degrees == 66.0 and "imx708" in whole.source
    assert cropped is not None and cropped.degrees == pytest.approx(51.94, abs=0.01)
    assert "3456 of 4608" in cropped.source
    # camera_properties as other libcamera versions may give them: the width falls back
    # to PixelArraySize, or to none (not narrowed), never an error that stops the camera.
    assert sensor({"Model": "imx219", "PixelArraySize": (3280, 2464)}) == ("imx219", 3280)
    assert sensor({"PixelArrayActiveAreas": [object()]}) == ("unknown", 0)


def test_picamera2_controls_applied_and_read_back(fake_picamera2: type[_FakePicamera2]) -> None:
    """[camera] controls as libcamera controls picamera2 passes on (names as picamera2's
    own code uses them, checked below), and what the camera did read back."""
    from edge.camera import Controls

    source = open_source("picamera2", width=64, height=48, timeout=2.0)
    source.controls = Controls(hflip=True, vflip=True, af="manual", lens_position=2.0, fps=5.0)
    with source:
        frames = [source.read(1.0) for _ in range(6)]
    asked = fake_picamera2.made[-1].asked
    assert asked["controls"] == {
        "AfMode": 0,
        "LensPosition": 2.0,
        "FrameDurationLimits": (200000, 200000),
    }
    transform = asked["transform"]
    assert (transform.hflip, transform.vflip) == (1, 1)
    assert source.refused == []
    applied = source.applied
    assert applied == {
        "af": "manual",
        "lens_position": 2.0,
        "fps": 5.0,
        "hflip": True,
        "vflip": True,
        "sensor_rate": 5.0,
        "frame_rate": 5.0,
        "lens_position_now": 0.5,
    }
    assert frames[-1].rgb.shape == (48, 64, 3)


@pytest.mark.parametrize("has_control", [True, False])
def test_picamera2_fps_cap_holds_when_the_sensor_runs_faster(
    fake_picamera2: type[_FakePicamera2], has_control: bool
) -> None:
    """A sensor at 10 frames a second, asked for 4 (one that takes FrameDurationLimits
    and ignores it, as libcamera's virtual camera does, or one without the control):
    read() returns frames at least 1/4 s apart by their sensor timestamps, every third,
    and converts none of those it drops."""
    from edge.camera import Controls

    fake_picamera2.period_ns = 100_000_000
    original = _FakePicamera2.__init__

    def no_limits(self: _FakePicamera2, num: int = 0) -> None:
        original(self, num)
        del self.camera_controls["FrameDurationLimits"]

    if not has_control:
        fake_picamera2.__init__ = no_limits  # type: ignore[method-assign]
    try:
        source = open_source("picamera2", width=64, height=48, timeout=2.0)
        source.controls = Controls(fps=4.0)
        with source:
            frames = [source.read(1.0) for _ in range(7)]
    finally:
        fake_picamera2.__init__ = original  # type: ignore[method-assign]
    gaps = np.diff([f.sensor_ts for f in frames])
    print("gaps between the frames read:", gaps.round(3).tolist(), "applied:", source.applied)
    assert np.allclose(gaps, 0.3), gaps  # 0.1 s frames: the first at least 0.25 s on is 0.3
    assert _FakeRequest.converted == 7
    applied = source.applied
    assert applied["fps"] == 4.0 and applied["dropped_for_fps"] == 12
    assert applied["sensor_rate"] == 10.0 and applied["frame_rate"] == pytest.approx(3.33, 0.01)
    asked = fake_picamera2.made[-1].asked["controls"]
    if has_control:
        assert asked["FrameDurationLimits"] == (250000, 250000) and source.refused == []
    else:
        assert "FrameDurationLimits" not in asked
        assert source.refused == [
            "picamera2: this camera has no FrameDurationLimits control (camera.fps): the "
            "sensor runs at its own rate and frames beyond the cap are dropped"
        ]


def test_picamera2_controls_the_camera_lacks_are_one_line_each(
    fake_picamera2: type[_FakePicamera2],
) -> None:
    """A camera without autofocus (a Camera Module 2) and a sensor that refuses a flip:
    one line each, the camera still opens."""
    from edge.camera import Controls

    original = _FakePicamera2.__init__

    def fixed_focus(self: _FakePicamera2, num: int = 0) -> None:
        original(self, num)
        self.camera_controls = {"FrameDurationLimits": (33333, 120000, 33333)}

    fake_picamera2.flips = False
    fake_picamera2.__init__ = fixed_focus  # type: ignore[method-assign]
    try:
        source = open_source("picamera2", width=64, height=48, timeout=2.0)
        source.controls = Controls(hflip=True, af="continuous")
        with source:
            source.read(1.0)
    finally:
        fake_picamera2.__init__ = original  # type: ignore[method-assign]
    assert source.refused == [
        "picamera2: this camera has no AfMode control (camera.af): not applied",
        "picamera2: this camera cannot hflip (camera.hflip): not applied",
    ]
    assert source.applied["hflip"] is False and "af" not in source.applied


@pytest.mark.network
def test_the_control_names_are_picamera2s() -> None:
    """The libcamera control names the source sets are the ones picamera2's own code
    sets (its source from PyPI, as the VM installs it)."""
    from scripts.support import vm

    code = (vm.picamera2_deps() / "picamera2" / "picamera2.py").read_text()
    for name in ('"FrameDurationLimits"', '"AfMode"', "AfModeEnum."):
        assert name in code, name
    ours = (ROOT / "edge" / "camera" / "picamera2.py").read_text()
    for name in ('"FrameDurationLimits"', '"AfMode"', '"LensPosition"', "AfModeEnum"):
        assert name in ours, name


def test_other_sources_say_once_that_they_ignore_controls() -> None:
    from edge.camera import Controls

    fake = open_source(
        "fake", width=16, height=8, controls=Controls(vflip=True, fps=2.0), timeout=2.0
    )
    assert fake.refused == [
        "fake: camera.vflip is a picamera2 control; not applied",
        "fake: camera.fps is a picamera2 control; not applied",
    ]


@pytest.mark.parametrize("full", [False, True])
def test_picamera2_small_stream_feeds_the_pipeline(
    fake_picamera2: type[_FakePicamera2], full: bool
) -> None:
    """A smaller picture for the pipeline is asked of the ISP as picamera2's lores
    stream (YUV420, the format a Pi's lores takes), converted from it; the full picture
    is converted only when an output wants it (``Streams.full``)."""
    from edge.camera import Streams

    source = open_source(
        "picamera2", width=64, height=48, streams=Streams(small=(32, 24), full=full), timeout=2.0
    )
    with source:
        frame = source.read(1.0)
    asked = fake_picamera2.made[-1].asked
    assert asked["lores"] == {"size": (32, 24), "format": "YUV420"}
    assert asked["main"] == {"size": (64, 48), "format": "RGB888"}
    assert frame.rgb.shape == (24, 32, 3) and np.abs(frame.rgb.astype(int) - 128).max() <= 1
    assert frame.camera_size == frame.size == (48, 64)
    assert _FakeRequest.streams == (["lores", "main"] if full else ["lores"])
    if full:
        assert frame.full is not None and frame.full.shape == (48, 64, 3)
        assert frame.scene is frame.full
    else:
        assert frame.full is None and frame.scene is frame.rgb
    assert source.applied["small_stream"] == "32x24" and source.refused == []


def test_picamera2_without_a_second_stream_gives_the_full_picture(
    fake_picamera2: type[_FakePicamera2],
) -> None:
    """A camera that refuses the second stream opens all the same, with one line: the
    pipeline takes the full picture. No small stream is asked when the picture is no
    larger than it."""
    from edge.camera import Streams

    fake_picamera2.lores_fails = True
    source = open_source(
        "picamera2", width=64, height=48, streams=Streams(small=(32, 24)), timeout=2.0
    )
    with source:
        frame = source.read(1.0)
    assert frame.rgb.shape == (48, 64, 3) and frame.camera_size is None
    assert frame.size == (48, 64) and _FakeRequest.streams == ["main"]
    assert source.refused == [
        "picamera2: no scaled second stream (Failed to configure camera): the pipeline "
        "takes the full picture"
    ]
    fake_picamera2.lores_fails = False
    source = open_source(
        "picamera2", width=64, height=48, streams=Streams(small=(64, 48)), timeout=2.0
    )
    with source:
        source.read(1.0)
    assert fake_picamera2.made[-1].asked["lores"] is None


def test_streams_for_a_core() -> None:
    """The small stream: the core's long side, the camera's aspect, even sides."""
    from edge.camera import Streams

    assert Streams.for_core(640, 480, 182, full=False) == Streams((182, 136), False)
    assert Streams.for_core(1280, 720, 504, full=True) == Streams((504, 284), True)
    assert Streams.for_core(720, 1280, 504, full=True) == Streams((284, 504), True)
    assert Streams.for_core(320, 240, 504, full=True) == Streams(None, True)


def test_a_picamera2_stop_that_never_returns_is_a_wedged_camera() -> None:
    """picamera2's stop() can block after a cable fault ("Dequeue timer ... expired"):
    close gives up after the read timeout and CLOSE_GRACE, and says so."""

    class Stuck:
        def stop(self) -> None:
            threading.Event().wait()

    source = Picamera2Source(timeout=0.5, width=1280, height=720)
    source._cam = Stuck()
    start = time.monotonic()
    with pytest.raises(CameraWedged, match=r"stop\(\) did not return within 3.5 s"):
        source.close()
    assert time.monotonic() - start < 0.5 + CLOSE_GRACE + 2
