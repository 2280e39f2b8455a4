"""The comparison's JSON as the lines compare_pytorch prints."""

from __future__ import annotations

from typing import Any


def render(s: dict[str, Any]) -> str:
    """Every figure of the run, one line each."""
    lines = [
        f"threads {s['threads']}, {s['rounds']} alternating rounds, "
        f"core {s['core_shape'][0]}x{s['core_shape'][1]} (size {s.get('size', 504)})",
        f"PyTorch reference forward (fp32, best of 3): {s['pytorch_forward_s'] * 1000:.0f} ms",
    ]
    peak = s["gemm_peak_flops_per_s"]
    g = s["gemm_flops_per_s"]
    lines.append(
        f"core network: {s['flops'] / 1e9:.1f} GFLOP per forward (reference forward with its "
        f"ray head: {s['reference_flops'] / 1e9:.1f}); fp32 GEMM peak, {s['threads']} threads: "
        f"{peak / 1e9:.0f} GFLOP/s (XNNPACK {g['xnnpack'] / 1e9:.0f}, torch.mm {g['torch_mm'] / 1e9:.0f})"
    )
    for k, v in s["core_s"].items():
        gf = s["core_flops_per_s"][k]
        lines.append(
            f"LiteRT core {k}: {v * 1000:.0f} ms = {s['core_ratio'][k]:.2f}x the reference forward, "
            f"{gf / 1e9:.0f} GFLOP/s ({gf / peak:.0%} of GEMM peak)"
        )
    return "\n".join(lines + stills(s) + peer(s) + daemon(s) + companions(s))


def stills(s: dict[str, Any]) -> list[str]:
    lines = []
    for k in s["still_s"]:
        lines.append(
            f"one still, fresh process, {k}: {s['still_s'][k]:.2f} s ({s['still_ratio'][k]:.2f}x), "
            f"peak RSS {s['still_peak_rss_mib'][k]:.0f} MiB ({s['rss_ratio'][k]:.2f}x)"
        )
    for k, v in s.get("load_ms", {}).items():
        to_depth = s.get("to_depth_ms", {}).get(k)
        lines.append(
            f"model load (open -> ready), {k}: {v:.0f} ms"
            + (f"; to the first depth map {to_depth:.0f} ms" if to_depth else "")
        )
    for k, v in (s.get("weight_cache_first") or {}).items():
        lines.append(
            f"first still with an empty weight cache, {k}: {v['seconds']:.2f} s, load "
            f"{v['load_ms']:.0f} ms (the cache built in a child process first)"
        )
    before = s.get("before")
    if before:
        lines.append(
            f"still, this revision / {before['revision']}: median {before['median_ratio']:.3f} "
            f"over {len(before['ratios'])} paired rounds "
            f"({min(before['ratios']):.3f}-{max(before['ratios']):.3f})"
        )
    return lines


def peer(s: dict[str, Any]) -> list[str]:
    found = s.get("peer") or {}
    if not found.get("measured"):
        return [f"depth-anything.cpp: not measured ({found.get('reason', 'no --peer given')})"]
    lines = []
    for k, v in found["load_ms"].items():
        r = found["log_depth_pearson"][k]
        lines.append(
            f"depth-anything.cpp {k}: model load {v:.0f} ms (its own report), to the "
            f"first depth map {found['to_depth_ms'][k]:.0f} ms; "
            f"log-depth Pearson against da3-edge's fp16 {r:.6f} (1 - r = {1 - r:.1e})"
        )
    return lines


def daemon(s: dict[str, Any]) -> list[str]:
    lines = []
    for d in [s.get("daemon"), *s.get("daemon_workers", {}).values()]:
        if not d:
            continue
        lines.append(
            f"daemon ({d['precision']}, {d['workers']} worker(s) x {d['threads_per_worker']} "
            f"thread(s), replay {d['replay_fps']:g} fps, {d['frames']} frames): "
            f"{d['fps']:.2f} frames/s = {d['ratio_to_core_rate']:.2f}x (1 / core latency "
            f"{d['core_s'] * 1000:.0f} ms), latency p50 {d['latency_p50_ms']:.0f} ms; "
            f"median of {len(d['rounds'])} rounds, "
            f"{d['ratio_range'][0]:.2f}-{d['ratio_range'][1]:.2f}x"
        )
    return lines


def companions(s: dict[str, Any]) -> list[str]:
    lines = []
    serve = s.get("serve")
    if serve is not None:
        delay = serve["event_delay_ms"]
        lines.append(
            f"serve: daemon frames/s with serve / alone {serve['median_fps_ratio']:.3f} "
            f"(median of {len(serve['rounds'])} rounds); serve "
            f"{serve['serve_cpu_ms_per_frame']:.1f} CPU-ms/frame, peak RSS "
            f"{serve['serve_peak_rss_mib']:.1f} MiB; latest -> event p50 {delay['p50']} ms, "
            f"p99 {delay['p99']} ms"
        )
    for r in (s.get("publish") or {}).get("runs", []):
        lines.append(
            f"publish (preview {'on' if r['preview'] else 'off'}): "
            f"{r['cpu_ms_per_message']:.2f} CPU-ms/message, latest -> state p50 "
            f"{r['delay_ms']['p50']} ms, p99 {r['delay_ms']['p99']} ms"
        )
    return lines
