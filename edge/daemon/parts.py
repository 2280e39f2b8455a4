"""What the daemon is made of, from its config: the pipeline, what it asks of the
camera, the store. Built at start, and again at a reload for what changed."""

from __future__ import annotations

import logging
from pathlib import Path

from edge import config as config_mod
from edge.camera import Streams
from edge.errors import EdgeError
from edge.pipeline import Pipeline, PipelineSpec
from edge.store.layout import default_store_dir
from edge.store.ring import FrameStore

log = logging.getLogger("edge.daemon")


def load_pipeline(model: config_mod.ModelConfig) -> Pipeline:
    """The daemon's pipeline for ``model``, its cores checked before any frame."""
    spec = PipelineSpec(
        model.dir or None,
        precision=model.precision,
        stages=model.stages,
        size=model.size or None,
        threads=model.threads or None,
        weight_cache=model.weight_cache or None,
        core_process=True,  # keeps the GIL free for capture and writing
        workers=model.workers,
    )
    pipeline = Pipeline.load(spec)
    try:
        # Refuse to start on a missing or tampered model, not at the first frame.
        for artifact in pipeline.artifacts:
            pipeline.manifest.verify(artifact)
    except BaseException:
        pipeline.close()  # its core processes and programs, not left to a failed reload
        raise
    log.info("stages: %s (%s)", pipeline.stages.name, pipeline.stages.reason)
    return pipeline


def camera_streams(config: config_mod.Config, pipeline: Pipeline) -> Streams:
    """What the pipeline needs of the camera: a picture scaled down to the input of the
    core it chooses for the camera's size (that core's long side) when the camera's is
    larger, and the full one too only when an output shows the picture itself ("rgb"
    in store.formats) at the camera's size (store.size = "camera"; at the core's, the
    small picture is as large as the outputs)."""
    cam = config.camera
    core = camera_core(config.camera, pipeline)
    long_side = max(core) if core else 0
    full = "rgb" in config.store.formats and config.store.size == "camera"
    return Streams.for_core(cam.width, cam.height, long_side, full=full)


def camera_core(cam: config_mod.CameraConfig, pipeline: Pipeline) -> tuple[int, int] | None:
    """The core shape the camera's picture runs at (None: no core for it, with
    --strict-shape: each frame says so)."""
    try:
        return pipeline.choose((cam.height, cam.width))[1]
    except EdgeError:
        return None


def make_store(store: config_mod.StoreConfig) -> FrameStore:
    return FrameStore(Path(store.dir) if store.dir else default_store_dir(), store)
