"""The real daemon with FakeCores in place of LiteRT, for the tests of what reads its
store (serve, publish) where the model is not the subject:

    python -m scripts.support.fakedaemon --config FILE [--max-frames N]

Everything but the core is the daemon's own (``edge.daemon.Daemon``: capture, the
inference scheduling, the writer through ``FrameStore``, status.json, sd_notify,
signals, reload); ``model.dir`` must hold a model folder ``edge.fakecore.fake_models``
wrote. Its frames say ``random_init`` and ``fake-core``. No export environment needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from edge import config as config_mod
from edge.daemon import Daemon, setup_logging
from edge.fakecore import FakeCore, fake_models
from edge.models import size_shapes
from edge.pipeline import Pipeline, PipelineSpec

DELAY = 0.03  # seconds a FakeCore "computes" a frame
SHAPES = size_shapes(238)  # one size's four: 4:3 and 16:9, both ways


def models(directory: Path) -> Path:
    """A model folder of FakeCore placeholders (fp16, the daemon's default), one per
    aspect ratio the pipeline chooses from."""
    return fake_models(directory, SHAPES)


LOAD_DELAY = [0.0]  # seconds the first load takes (--load-delay): a Pi's minutes, shorter
BURN = [False]  # --burn: the cores spin on the CPU while they "compute", as real ones do


def open_pipeline(model: config_mod.ModelConfig) -> Pipeline:
    if LOAD_DELAY[0]:
        print(f"fakedaemon: loading for {LOAD_DELAY[0]:g} s", file=sys.stderr, flush=True)
        time.sleep(LOAD_DELAY[0])
        LOAD_DELAY[0] = 0.0
    open_core, _ = FakeCore.opener(delay=DELAY, burn=BURN[0])
    spec = PipelineSpec(
        Path(model.dir),
        precision=model.precision,
        stages=model.stages,
        core_process=True,
        workers=model.workers,
        size=model.size or None,
    )
    return Pipeline.load(spec, open_core=open_core)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--max-frames", type=int, default=0)
    p.add_argument("--load-delay", type=float, default=0.0)
    p.add_argument("--burn", action="store_true")
    ns = p.parse_args(argv)
    LOAD_DELAY[0], BURN[0] = ns.load_delay, ns.burn
    setup_logging()
    config = config_mod.load(ns.config)
    return Daemon(config, max_frames=ns.max_frames, open_pipeline=open_pipeline).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
