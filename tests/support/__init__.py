"""What the tests, the CI lanes and the maintainer tools share: the models exported for
tests, the photos, host tools and mounts, the daemon harness, the VM, the container,
the broker. Imported as ``tests.support.*`` from the checkout (``python -m`` there puts it
on the path); nothing in it is a test."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
