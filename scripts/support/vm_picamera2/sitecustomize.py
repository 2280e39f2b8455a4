"""Test set-up only, never shipped: what unmodified picamera2 0.3.38 needs to run on
libcamera 0.4's virtual camera in the VM (tests/test_vm.py). On a Pi none of this applies.

This directory goes first on the VM's PYTHONPATH, so Python loads this file at start-up
(``sitecustomize``) and ``kms.py`` beside it stands in for Pi OS's python3-kms++. Each
patch below names the line of picamera2 that stops without it; the test prints them.

1. ``previews/drm_preview.py`` imports ``kms``/``pykms`` (python3-kms++, only in the
   Raspberry Pi repository; PyPI's ``kms`` is an unrelated project): ``kms.py`` here.
2. ``picamera2.py`` ``_get_raw_modes`` asks for the Raw stream role, which the virtual
   camera does not have (``generate_configuration`` returns None): the processed
   formats stand in for sensor modes.
3. ``Picamera2.__init__`` (and ``close``) make a ``DmaAllocator``: its heaps
   (``dma_heap.py``: vidbuf_cached, linux,cma) are the Pi's ("Could not open any
   dmaHeap device"), and the single-plane buffers it makes abort libcamera's virtual
   pipeline (it wants NV12's three planes): libcamera's own ``FrameBufferAllocator``
   (picamera2's ``LibcameraAllocator``) instead.
4. ``allocators/allocator.py`` ``Sync`` maps the sum of the planes' ``bytes_used``,
   which the virtual camera leaves at 0 (mmap: EINVAL): map the planes' lengths.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import mmap
import sys
from typing import Any

PATCHES = (
    "previews/drm_preview.py: kms stubbed",
    "picamera2.py _get_raw_modes: processed formats stand in for the Raw role",
    "picamera2.py DmaAllocator: LibcameraAllocator instead",
    "allocators/allocator.py Sync: planes' lengths instead of bytes_used",
)


class _PlaneLengthSync:
    def __init__(self, allocator: Any, fb: Any, write: bool) -> None:
        self._fb = fb
        self._mm: mmap.mmap | None = None

    def __enter__(self) -> mmap.mmap:
        planes = list(self._fb.planes)
        fd = planes[0].fd
        if any(p.fd != fd for p in planes):
            raise RuntimeError("vm shim: planes on more than one dma-buf")
        size = max(p.offset + p.length for p in planes)
        self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        return self._mm

    def __exit__(self, *exc: object) -> None:
        if self._mm is not None:
            self._mm.close()


def _patch(module: Any) -> None:
    import libcamera
    from picamera2.allocators import LibcameraAllocator

    cls = module.Picamera2
    raw_modes, init = cls._get_raw_modes, cls.__init__

    def _get_raw_modes(self: Any) -> list[dict[str, Any]]:
        if self.camera.generate_configuration([libcamera.StreamRole.Raw]) is not None:
            return raw_modes(self)  # type: ignore[no-any-return]
        formats = self.camera.generate_configuration([libcamera.StreamRole.Viewfinder]).at(0)
        return [
            {"format": str(pix), "size": (s.width, s.height)}
            for pix in formats.formats.pixel_formats
            for s in formats.formats.sizes(pix)
        ]

    class _VmAllocator(LibcameraAllocator):  # type: ignore[misc]
        def __init__(self) -> None:  # picamera2 makes one in __init__ and in close()
            super().__init__(None)
            self.sync = _PlaneLengthSync

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.allocator.camera = self.camera

    module.DmaAllocator = _VmAllocator
    cls._get_raw_modes, cls.__init__ = _get_raw_modes, __init__
    print("vm shim: picamera2 patched:", "; ".join(PATCHES), file=sys.stderr)


class _AfterPicamera2(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "picamera2.picamera2":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec else None
        if loader is None:
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _AfterPicamera2())
