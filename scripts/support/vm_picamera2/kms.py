"""Test set-up only: stands in for Pi OS's python3-kms++ (see sitecustomize.py here).
picamera2's DRM preview names pixel formats at import and probes cards when listing
displays; the VM has no display, so every format is a name and every card is absent."""

from __future__ import annotations


class _Names:
    def __getattr__(self, name: str) -> str:
        return name


PixelFormats = _Names()
PixelFormat = PixelFormats


class Card:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("no DRM/KMS device in the VM")


def __getattr__(name: str) -> object:
    raise AttributeError(f"kms stub (VM test set-up): no {name}")
