"""Numbers that say how close two depth maps are, and the limits per precision.

Shared by the export-time verify step, the parity suite and the benchmarks so that
they all mean the same thing by "Pearson" and "rel-L2". numpy only.
"""

from __future__ import annotations

import numpy as np

# precision -> (minimum Pearson correlation, maximum relative L2 error or None)
TOLERANCES: dict[str, tuple[float, float | None]] = {
    "fp32": (0.99999, 1e-4),
    "fp16": (0.9999, 5e-3),
    "int8": (0.99, None),
}


def metrics(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """Pearson on the flattened maps, rel-L2 = |c - r| / |r|, max and mean |c - r|."""
    ref = np.asarray(reference, dtype=np.float64).ravel()
    cand = np.asarray(candidate, dtype=np.float64).ravel()
    if ref.shape != cand.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {candidate.shape}")
    diff = cand - ref
    ref_c, cand_c = ref - ref.mean(), cand - cand.mean()
    denom = np.sqrt((ref_c @ ref_c) * (cand_c @ cand_c))
    pearson = float(ref_c @ cand_c / denom) if denom > 0 else float("nan")
    norm = float(np.linalg.norm(ref))
    return {
        "pearson": pearson,
        "rel_l2": float(np.linalg.norm(diff) / norm) if norm > 0 else float("inf"),
        "max_abs": float(np.abs(diff).max()),
        "mean_abs": float(np.abs(diff).mean()),
    }


def compare(reference: np.ndarray, candidate: np.ndarray, precision: str) -> dict[str, float]:
    """``metrics`` plus ``ok`` (1.0 or 0.0) against the limits for ``precision``."""
    result = metrics(reference, candidate)
    min_pearson, max_rel = TOLERANCES[precision]
    ok = result["pearson"] >= min_pearson and (max_rel is None or result["rel_l2"] <= max_rel)
    result["ok"] = 1.0 if ok else 0.0
    return result
