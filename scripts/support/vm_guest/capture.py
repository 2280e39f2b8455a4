"""libcamera's own Python bindings, as picamera2 uses them: configure, allocate, queue,
wait on the event fd, map each plane's dma-buf; three NV12 frames to /job/frames.
(``cam --file`` writes empty files here: libcamera 0.4's virtual camera leaves the
metadata's bytesused at 0, and cam writes that many bytes.)

    python3 capture.py WIDTH HEIGHT
"""

from __future__ import annotations

import mmap
import selectors
import sys

import libcamera as lc


def main(width: int, height: int) -> int:
    cm = lc.CameraManager.singleton()
    cam = cm.cameras[0]
    cam.acquire()
    cfg = cam.generate_configuration([lc.StreamRole.Viewfinder])
    sc = cfg.at(0)
    sc.size = lc.Size(width, height)
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
            with open(f"/job/frames/{got}.bin", "wb") as f:
                f.write(data)
            print("frame", got, "planes", [p.length for p in buf.planes], buf.metadata.status)
            got += 1
            req.reuse()
            cam.queue_request(req)
    cam.stop()
    cam.release()
    print("captured", got)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
