"""da3-edge against the PyTorch reference, side by side, in one run.

Run it with the export environment (it needs torch and depth_anything_3):

    .venv-export/bin/python -m scripts.compare_pytorch --weights DIR --models DIR \\
        [--image photo.jpg] [--threads 2] [--rounds 3] [--size 504] [--json out.json]

--size N runs both at that long side (DA3's process_res N; da3-edge's `--size N`, for
which --models must hold models exported at N, e.g. `da3-edge export --size 280`), the
daemon's figure included. DIR for --weights is a release-layout folder (config.json +
model.safetensors: the real release, or seeded random weights from `da3-edge export
--random-init 0 --save-weights DIR --weights-only`); --models holds da3-edge models
exported from the same weights.

Measured, alternating the contenders round by round, each in a fresh process:

- baseline (a): the depth_anything_3 network built with cfg.create_object, weights
  from the safetensors file, DA3's own preprocessing (its InputProcessor), a plain
  fp32 forward (no autocast), depth resized to the photo and written as a 16-bit PNG,
  torch.set_num_threads(--threads). Reports its forward time too (best of 3).
- da3-edge (b): `da3-edge snap` in its default configuration (stages auto: the
  ExecuTorch stages where the torch-free runner is installed, `da3-edge
  install-executorch`; fp16, default outputs) from the runtime env (--runtime-python,
  default .venv), and the same with `--stages numpy`.
- stages: scripts/bench_stages.py in the runtime env, numpy and ExecuTorch stages
  alternating call by call, at 1 thread and at --threads.
- core: LiteRT fp32 / fp16 / int8 core latency (best of 5 after warm-up) in this process,
  against the baseline's forward time, at the same thread count.
- daemon: `da3-edge run` on replayed 1200x1600 JPEGs (default config, and each other
  --daemon-workers value), sustained frames/s against 1 / the fp16 core's latency
  timed just before (--daemon-rounds rounds, the median reported).
- serve: scripts/bench_serve.py in the runtime env: the daemon with `da3-edge serve`
  and a page-like client against the daemon alone (--serve-rounds paired rounds),
  serve's CPU-ms per frame, peak RSS, and the `latest` switch to /events delay.
- publish: scripts/bench_publish.py (needs mosquitto): `da3-edge publish`'s CPU-ms per
  message with the preview off and on, and the `latest` switch to `state` delay.
- start-up: every da3-edge still is traced (DA3_EDGE_TRACE), so its model load (core
  open -> ready) is reported; the XNNPACK weight cache lives in this run's own directory,
  built by one still per precision before the rounds (its "first" load reported apart),
  and `snap --weight-cache off` and `snap --precision int8` run in the rounds too.
- peer (--peer CLI --peer-gguf PRECISION=FILE ...): depth-anything.cpp's `da3-cli depth`
  (a C++/ggml port; build and GGUFs: scripts/peer/README.md) in the same rounds: its
  still (PFM + PNG at the processing size, which is less than da3-edge writes) and, in a
  process of its own, its model load and first inference as it reports them (`--repeat
  1`; beside da3-edge's trace from the pipeline loaded to the core's run); its depth is
  checked against da3-edge's (log-depth Pearson), so both ran the same weights. Without
  --peer the JSON says the peer was not measured.
- before (--before DIR): `da3-edge snap` from a checkout of an earlier revision
  (PYTHONPATH=DIR, same runtime env) alternating with this one: the per-round ratio
  new / before and its median.

Prints a table; --json writes the raw numbers (scripts/support/performance_tables.py turns
that JSON into the table in docs/performance.md).
"""
