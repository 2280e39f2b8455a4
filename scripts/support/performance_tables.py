"""docs/performance.md's tables from the committed JSON (written and checked by
``python -m scripts.generated``): the comparison with the PyTorch reference
(docs/bench/compare-x86_64.json, what ``python -m scripts.compare_pytorch --json``
wrote) and start-up and memory against depth-anything.cpp (docs/bench/peer-x86_64.json,
a ``--peer`` run: the stills only, no daemon, serve or publish).
"""

from __future__ import annotations

from typing import Any

Data = dict[str, Any]


def _head(data: Data) -> str:
    """The line above a table: machine, threads, rounds, revision, image."""
    cpu = data["machine"]["cpu"]
    return (
        f"{cpu['model']} ({cpu['machine']}, {cpu['cores']} cores), {data['threads']} threads, "
        f"{data['rounds']} alternating rounds (medians), git {data['machine']['git_revision']}, "
        f"image: {data['image']}."
    )


def render(data: Data) -> str:
    """The comparison with the PyTorch reference: the line above, the table, the FLOPs."""
    rows = [
        "| measure | PyTorch reference | da3-edge | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        *_core_rows(data),
        *_still_rows(data),
        *_stage_rows(data),
        *_daemon_rows(data),
    ]
    return "\n".join([_head(data), "", *rows, *_flops(data)])


def _core_rows(data: Data) -> list[str]:
    fwd = data["pytorch_forward_s"] * 1000
    rows = []
    for precision in ("fp32", "fp16", "int8"):
        if precision in data["core_s"]:
            target = {"fp32": "<= 0.60", "int8": "<= 0.35"}.get(precision, "")
            rows.append(
                f"| core {precision}, {data['core_shape'][0]}x{data['core_shape'][1]} | {fwd:.0f} ms | "
                f"{data['core_s'][precision] * 1000:.0f} ms | {data['core_ratio'][precision]:.2f} | {target} |"
            )
    return rows


def _still_rows(data: Data) -> list[str]:
    rows = []
    default = f"default ({data['default_stages']} stages, fp16)"
    for name, label in (("da3-edge", default), ("da3-edge-numpy", "numpy stages")):
        rows.append(
            f"| one still, fresh process, {label} | {data['still_s']['pytorch']:.2f} s | "
            f"{data['still_s'][name]:.2f} s | {data['still_ratio'][name]:.2f} | "
            + ("<= 0.35" if name == "da3-edge" else "")
            + " |"
        )
        rows.append(
            f"| peak RSS of that still, {label} | {data['still_peak_rss_mib']['pytorch']:.0f} MiB | "
            f"{data['still_peak_rss_mib'][name]:.0f} MiB | {data['rss_ratio'][name]:.2f} | "
            + ("<= 0.5 and <= 350 MiB" if name == "da3-edge" else "")
            + " |"
        )
    return rows


def _stage_rows(data: Data) -> list[str]:
    rows = []
    for threads, st in sorted((data.get("stages") or {}).items()):
        (h, w), (ch, cw) = st["size"], st["shape"]
        res = st["results"]
        for kind in ("pre", "post"):
            what = (
                f"preprocess {h}x{w} -> {ch}x{cw}"
                if kind == "pre"
                else f"postprocess {ch}x{cw} -> {h}x{w}"
            )
            rows.append(
                f"| {what}, {threads} thread(s): numpy vs ExecuTorch stages | "
                f"{res['numpy'][f'{kind}_ms_median']:.1f} ms (numpy) | "
                f"{res['executorch'][f'{kind}_ms_median']:.1f} ms | "
                f"{res[f'ratio_{kind}_median']:.2f} | <= 1.0 |"
            )
    return rows


def _daemon_rows(data: Data) -> list[str]:
    rows = []
    d = data.get("daemon")
    if d:
        rows.append(
            f"| daemon `da3-edge run`, replayed 1200x1600 JPEGs at {d['replay_fps']:g} fps "
            f"({d['precision']}, default config: {d['workers']} worker x {d['threads_per_worker']} threads, "
            f"{d['frames']} frames, store on {d['store']}) | | "
            f"{d['fps']:.2f} frames/s, latency p50 {d['latency_p50_ms']:.0f} ms | "
            f"{d['ratio_to_core_rate']:.2f} x (1 / core {d['core_s'] * 1000:.0f} ms); "
            f"median of {len(d['rounds'])} rounds, each against the core timed just before it: "
            f"{d['ratio_range'][0]:.2f}-{d['ratio_range'][1]:.2f} | >= 0.95 |"
        )
    for w in data["daemon_workers"].values():
        rows.append(
            f"| the same with `model.workers = {w['workers']}` ({w['threads_per_worker']} "
            f"thread(s) each) | | {w['fps']:.2f} frames/s, latency p50 "
            f"{w['latency_p50_ms']:.0f} ms | {w['ratio_to_core_rate']:.2f} x (1 / core "
            f"{w['core_s'] * 1000:.0f} ms); rounds {w['ratio_range'][0]:.2f}-"
            f"{w['ratio_range'][1]:.2f} |  |"
        )
    return rows


def _flops(data: Data) -> list[str]:
    peak = data.get("gemm_peak_flops_per_s")
    if not peak:
        return []
    lines = [
        "",
        f"The core's network: {data['flops'] / 1e9:.1f} GFLOP per forward at "
        f"{data['core_shape'][0]}x{data['core_shape'][1]} (the export wrapper, counted by "
        f"torch's FlopCounterMode with math attention; the reference forward, which also runs "
        f"DA3's ray head, is {data['reference_flops'] / 1e9:.1f}). This machine's fp32 GEMM peak "
        f"at {data['threads']} threads: {peak / 1e9:.0f} GFLOP/s, the best of XNNPACK through "
        f"LiteRT on a 1024x2048x2048 product ({data['gemm_flops_per_s']['xnnpack'] / 1e9:.0f}) and "
        f"torch.mm on squares ({data['gemm_flops_per_s']['torch_mm'] / 1e9:.0f}).",
        "",
        "| core | GFLOP/s achieved | of GEMM peak |",
        "| --- | --- | --- |",
    ]
    for precision, rate in data["core_flops_per_s"].items():
        lines.append(f"| {precision} | {rate / 1e9:.0f} | {rate / peak:.0%} |")
    return lines


def render_peer(data: Data) -> str:
    """da3-edge's start-up and memory against depth-anything.cpp."""
    peer = data.get("peer") or {"measured": False, "reason": "no peer in this run"}
    head = _head(data)
    if peer["measured"]:
        head += f" Peer: {peer.get('source') or peer['cli']}."
    rows = [
        "| measure | depth-anything.cpp | da3-edge | da3-edge / peer | target |",
        "| --- | --- | --- | --- | --- |",
        *_peer_rows(data, peer),
        *_edge_only_rows(data),
    ]
    if peer["measured"]:
        agree = ", ".join(f"{k} {1 - v:.1e}" for k, v in peer["log_depth_pearson"].items())
        tail = [
            "",
            f"Same weights on both sides: 1 - Pearson of log-depth against da3-edge's fp16 "
            f"still, {agree}.",
        ]
    else:
        tail = ["", f"depth-anything.cpp was not measured in this run ({peer['reason']})."]
    return "\n".join([head, "", *rows, *tail])


def _peer_rows(data: Data, peer: Data) -> list[str]:
    still, rss, load = data["still_s"], data["still_peak_rss_mib"], data.get("load_ms", {})
    first, to_depth = data.get("weight_cache_first", {}), data.get("to_depth_ms", {})
    rows = []

    def row(what: str, theirs: float | None, ours: float, unit: str, fmt: str, target: str) -> None:
        ratio = f"{ours / theirs:.2f}" if theirs else ""
        them = f"{theirs:{fmt}} {unit}" if theirs is not None else "not measured"
        rows.append(f"| {what} | {them} | {ours:{fmt}} {unit} | {ratio} | {target} |")

    pairs = (
        ("f16", "fp16", "da3-edge", "<= 230 MiB"),
        ("q8_0", "int8", "da3-edge-int8", "<= 180 MiB"),
    )
    for theirs, ours, name, rss_target in pairs:
        measured = peer["measured"] and f"depth-anything.cpp-{theirs}" in still
        label, peer_name = f"{theirs} / {ours}", f"depth-anything.cpp-{theirs}"
        peer_still = still[peer_name] if measured else None
        row(f"one still, fresh process, {label}", peer_still, still[name], "s", ".2f", "")
        peer_rss = rss[peer_name] if measured else None
        row(f"peak RSS of that still, {label}", peer_rss, rss[name], "MiB", ".0f", rss_target)
        if name in load:
            what = f"model load, {label}, weight cache warm"
            target = "<= 60 ms" if ours == "fp16" else ""
            peer_load = peer["load_ms"][theirs] if measured else None
            row(what, peer_load, load[name], "ms", ".0f", target)
        if name in to_depth:
            what = f"to the first depth map (decode, load, preprocess, core run), {label}"
            peer_depth = peer["to_depth_ms"][theirs] if measured else None
            row(what, peer_depth, to_depth[name], "ms", ".0f", "")
        if ours in first:
            rows.append(
                f"| the first still, its weight cache empty, {ours} (built in a child first) | | "
                f"{first[ours]['seconds']:.2f} s, load {first[ours]['load_ms']:.0f} ms, peak "
                f"{first[ours]['peak_rss_mib']:.0f} MiB | | |"
            )
    return rows


def _edge_only_rows(data: Data) -> list[str]:
    still, rss, load = data["still_s"], data["still_peak_rss_mib"], data.get("load_ms", {})
    rows = []
    if "da3-edge-cache-off" in still:
        rows.append(
            f"| fp16 with `--weight-cache off` | | {still['da3-edge-cache-off']:.2f} s, "
            f"peak {rss['da3-edge-cache-off']:.0f} MiB, load {load.get('da3-edge-cache-off', 0):.0f} ms | | |"
        )
    before = data.get("before")
    if before:
        rows.append(
            f"| one still, this revision / {before['revision']} (fp16, paired rounds) | | "
            f"{still['da3-edge']:.2f} s / {still['da3-edge-before']:.2f} s, peak "
            f"{rss['da3-edge']:.0f} / {rss['da3-edge-before']:.0f} MiB | "
            f"{before['median_ratio']:.3f} (median; {min(before['ratios']):.3f}-"
            f"{max(before['ratios']):.3f}) | <= 1.02 |"
        )
    return rows


def render_sizes(data: Data) -> str:
    """The price of each size (scripts/price_sizes): the line above, the table."""
    cpu = data["machine"]["cpu"]
    random_init = "; random-init weights (the cost of a size, not its accuracy)."
    head = (
        f"{cpu['model']} ({cpu['machine']}, {cpu['cores']} cores), {data['threads']} threads, "
        f"{data['rounds']} alternating rounds (medians), git {data['machine']['git_revision']}, "
        f"image: {data['image']}" + (random_init if data["random_init"] else ".")
    )
    daemons = [r["daemon"] for r in data["sizes"] if "daemon" in r]
    stages = sorted({run["stages"] for d in daemons for run in d["rounds"]})
    if stages:
        head += (
            f" Daemon: `da3-edge run`, default config (fp16, {' / '.join(stages)} stages), "
            f"{data['daemon_frames']} frames replayed at twice the core's rate; in brackets "
            "its frames/s x the fp16 core's time measured just before it (target >= 0.95)."
        )
    rows = [
        "| size | core shape | tokens | GFLOP | core fp16 | core int8 | still fp16 | still int8 "
        "| daemon |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["sizes"]:
        core = [f"{r['core_ms'][p]:.0f} ms ({r['core_ratio'][p]:.2f})" for p in ("fp16", "int8")]
        still = [f"{r['still_s'][p]:.2f} s ({r['still_ratio'][p]:.2f})" for p in ("fp16", "int8")]
        d = r.get("daemon")
        daemon = f"{d['fps']:.2f} frames/s ({d['ratio_to_core_rate']:.2f})" if d else "not run"
        rows.append(
            f"| {r['size']} | {r['shape'][0]}x{r['shape'][1]} | {r['tokens']} | "
            f"{r['gflop']:.1f} | {' | '.join(core)} | {' | '.join(still)} | {daemon} |"
        )
    return "\n".join([head, "", *rows])


def render_a76_sizes(data: Data, sizes: Data) -> str:
    """Guest instructions of one warm fp16 forward per core size on the emulated
    Cortex-A76 (scripts/arm-lane.sh kernel-sizes), beside each size's GFLOP (from
    ``sizes``, scripts/price_sizes' JSON): the line above, the table."""
    run = data["_run"]
    counted = sorted(
        (v for k, v in data.items() if not k.startswith("_")),
        key=lambda v: max(v["shape"]),
        reverse=True,
    )
    gflop = {tuple(r["shape"]): r["gflop"] for r in sizes["sizes"]}
    base = next(v for v in counted if max(v["shape"]) == 504)
    head = (
        f"{run['qemu'].split(' (')[0]} -cpu cortex-a76, {run['litert']}, git {run['revision']}; "
        "one thread, fp16 arithmetic, a warm forward; guest instructions: a relative cost, "
        "never a time"
        + ("; random-init weights." if any(v["random_init"] for v in counted) else ".")
    )
    rows = [
        "| size | core shape | GFLOP | guest instructions | instructions per FLOP | ratio to 504 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in counted:
        h, w = v["shape"]
        g = gflop[(h, w)]
        rows.append(
            f"| {max(h, w)} | {h}x{w} | {g:.1f} | {v['instructions'] / 1e9:.2f} G | "
            f"{v['instructions'] / (g * 1e9):.3f} | {v['instructions'] / base['instructions']:.2f} |"
        )
    return "\n".join([head, "", *rows])


def render_steady(data: Data) -> str:
    """The steady view (scripts/steady.py): flicker today and steady, the cut's
    recovery, the cost a frame."""
    cpu = data["machine"]["cpu"]
    flick, cost = data["flicker"], data["cost"]
    head = (
        f"{cpu['model']} ({cpu['machine']}, {cpu['cores']} cores), git "
        f"{data['machine']['git_revision']}; {data['frames']} frames a sequence, the cut at "
        f"frame {data['cut_at']}; timings: medians of {data['rounds']} alternating rounds."
    )
    rows = [
        "| sequence | preview change a frame, today | steady | steady / today | new scenes "
        "(frame) | cut recovered (frames: today, steady) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("still", "pan", "cut"):
        r = flick[name]
        recovered = f"{r['recovery_today']}, {r['recovery_steady']}" if name == "cut" else ""
        scenes = ", ".join(str(n) for n in r["new_scenes"])
        rows.append(
            f"| {name} | {r['today']:.2f} levels | {r['steady']:.2f} levels | "
            f"{r['ratio']:.2f} | {scenes} | {recovered} |"
        )
    rows += [
        "",
        "| output size | Steady.step | PNG + preview | PNG + steady preview | steady's cost a frame |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, c in cost.items():
        ms, (h, w) = c["ms"], c["size"]
        rows.append(
            f"| {name}, {h}x{w} | {ms['step']:.2f} ms | {ms['render']:.2f} ms | "
            f"{ms['render_steady']:.2f} ms | {ms['extra']:+.2f} ms |"
        )
    return "\n".join([head, "", *rows])
