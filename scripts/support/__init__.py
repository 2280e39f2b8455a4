"""The maintainer's support package: what the tests, the CI lanes and the maintainer's
tools stand on. The models exported for tests, the photos, host tools and mounts, the
daemon harness (and the daemon on replayed photos, timed), the VM, the container, the
broker; and the parts of the tools the tests exercise (the soak, the comparison with the
PyTorch reference, the kernel names, the generated docs). Imported as
``scripts.support.*`` from the checkout; it imports ``edge`` and itself, nothing else of
the checkout (tests/test_house.py reads the import graph). Nothing in it is a test, and
none of it ships with da3-edge."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
