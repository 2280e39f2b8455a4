"""A real libcamera in a real kernel: the VM (tests/vm.py) boots Debian trixie, and its
virtual camera, fed a known photo, delivers frames through real dma-bufs.

The first step of the picamera2 work (issue 16): the machine, the kernel features
libcamera allocates from (a dma-buf heap, udmabuf) and libcamera's own ``cam`` capturing
from the virtual pipeline handler. The frames must be the photo: the luma plane of each
NV12 frame against the photo's, in the right orientation.

What libcamera 0.4.0's virtual camera does that a real one does not (found here, for the
picamera2 source that comes next): it reports three planes for NV12, the third empty
("Invalid plane index, stride is zero"); every other completed request's metadata status
is outside the enum (printed as ``Status.???``) though its pixels are right; and it
leaves ``bytesused`` at 0, so ``cam --file`` writes empty files.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from . import vm

pytestmark = pytest.mark.vm

W, H = 640, 480
VIRTUAL_YAML = f"""%YAML 1.1
---
"Virtual0":
  supported_formats:
  - width: {W}
    height: {H}
  frames:
    path: "/job/photo.jpg"
  model: "da3-edge test photo"
"""
JOB = """set -e
mkdir -p /usr/share/libcamera/pipeline/virtual
cp /job/virtual.yaml /usr/share/libcamera/pipeline/virtual/virtual.yaml
echo "heaps: $(ls /dev/dma_heap) udmabuf: $(ls /dev/udmabuf)"
uname -r
cam --list
mkdir -p /job/frames
python3 /job/capture.py
"""
# libcamera's own Python bindings, as picamera2 uses them: configure, allocate, queue,
# wait on the event fd, map each plane's dma-buf. (``cam --file`` writes empty files
# here: libcamera 0.4's virtual camera leaves the metadata's bytesused at 0, and cam
# writes that many bytes.)
CAPTURE = f"""
import mmap, selectors
import libcamera as lc

cm = lc.CameraManager.singleton()
cam = cm.cameras[0]
cam.acquire()
cfg = cam.generate_configuration([lc.StreamRole.Viewfinder])
sc = cfg.at(0)
sc.size = lc.Size({W}, {H})
sc.pixel_format = lc.PixelFormat("NV12")
print("validate:", cfg.validate())
cam.configure(cfg)
print("configured:", sc, "stride", sc.stride)
alloc = lc.FrameBufferAllocator(cam)
alloc.allocate(sc.stream)
requests = []
for buf in alloc.buffers(sc.stream):
    req = cam.create_request()
    req.add_buffer(sc.stream, buf)
    requests.append(req)
cam.start()
for req in requests:
    cam.queue_request(req)
sel = selectors.DefaultSelector()
sel.register(cm.event_fd, selectors.EVENT_READ)
got = 0
while got < 3:
    sel.select(timeout=10)
    for req in cm.get_ready_requests():
        buf = req.buffers[sc.stream]
        data = b""
        for p in buf.planes:
            with mmap.mmap(p.fd, p.offset + p.length, mmap.MAP_SHARED, mmap.PROT_READ) as m:
                data += m[p.offset : p.offset + p.length]
        with open(f"/job/frames/{{got}}.bin", "wb") as f:
            f.write(data)
        print("frame", got, "planes", [p.length for p in buf.planes], buf.metadata.status)
        got += 1
        req.reuse()
        cam.queue_request(req)
cam.stop()
cam.release()
print("captured", got)
"""


def photo() -> Image.Image:
    """Something with a top, a bottom, a left and a right: a gradient, two squares."""
    x = np.linspace(0, 255, W, dtype=np.float32)
    y = np.linspace(0, 120, H, dtype=np.float32)[:, None]
    grey = (0.6 * x + y).clip(0, 255).astype(np.uint8)
    img = Image.fromarray(np.stack([grey, grey[::-1], 255 - grey], axis=-1))
    draw = ImageDraw.Draw(img)
    draw.rectangle((40, 40, 200, 160), fill=(255, 255, 255))
    draw.rectangle((440, 320, 600, 440), fill=(0, 0, 0))
    return img


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel().astype(np.float64), b.ravel().astype(np.float64))[0, 1])


def test_libcamera_virtual_camera_captures_the_photo(tmp_path: Path) -> None:
    for tool in ("qemu-system-x86_64", "mmdebstrap", "mkfs.ext4"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: .ci/run installs requirements/apt.txt")
    buf = io.BytesIO()
    photo().save(buf, "JPEG", quality=95)
    result = vm.run(
        JOB,
        {
            "photo.jpg": buf.getvalue(),
            "virtual.yaml": VIRTUAL_YAML.encode(),
            "capture.py": CAPTURE.encode(),
        },
        timeout=300,
        job=tmp_path / "job",
    )
    print(result.out)
    assert result.rc == 0, result.out + "\n--- console:\n" + result.console[-3000:]
    assert "heaps: system udmabuf: /dev/udmabuf" in result.out
    assert "(Virtual0)" in result.out  # cam --list names the virtual camera
    frames = sorted((result.job / "frames").glob("*.bin"))
    assert len(frames) >= 3, frames  # requests complete in batches: 3 or a few more
    expected = np.asarray(photo().convert("L"))
    for frame in frames:
        data = np.frombuffer(frame.read_bytes(), np.uint8)
        assert data.size == W * H * 3 // 2, f"{data.size} bytes: not a {W}x{H} NV12 frame"
        luma = data[: W * H].reshape(H, W)
        r, rotated = pearson(luma, expected), pearson(luma, expected[::-1, ::-1])
        print(
            f"{frame.name}: NV12 luma vs the photo's: Pearson {r:.5f} (rotated 180: {rotated:.3f})"
        )
        assert r > 0.99 and rotated < 0.5
