"""DA3-small's monocular depth and confidence computed with numpy from the release.

The check a device runs on the models it built (``da3-edge models --verify``): the
built LiteRT core against this forward, written from DA3's own modules (DINOv2 ViT-S/14
with RoPE, QK-norm, the camera token and layer scale, then the DualDPT head's depth
branch) and sharing nothing with the graph but the release file: no template, no
recipe, no folded norm. It computes in float64 at a small shape (a 140x182 image: 130
tokens), where its cost is a few hundred MFLOP and tens of MB. The position embedding's
bicubic resampling is ``edge.release.resample_pos_embed``, checked against torch on its
own (tests/test_release.py); tests/test_forward.py checks this forward against the
reference package's.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from edge.models import PREFIX
from edge.release import Release, resample_pos_embed

PATCH = 14
DIM, HEADS, DEPTH = 384, 6, 12
ALT_START = ROPE_START = QK_NORM_START = 4  # DA3-small's config
OUT_LAYERS = (5, 7, 9, 11)
BLOCK_EPS, NORM_EPS = 1e-6, 1e-5  # the blocks' LayerNorms; every other one
ROPE_BASE = 100.0
Array = npt.NDArray[np.float64]


class Tensors:
    """The release's tensors by their module names, as float64."""

    def __init__(self, release: Release) -> None:
        self.release = release

    def __call__(self, name: str) -> Array:
        return self.release.get(PREFIX + name).astype(np.float64)

    def linear(self, x: Array, name: str, bias: bool = True) -> Array:
        out = x @ self(f"{name}.weight").T
        return out + self(f"{name}.bias") if bias else out

    def norm(self, x: Array, name: str, eps: float) -> Array:
        return layer_norm(x, eps) * self(f"{name}.weight") + self(f"{name}.bias")


def layer_norm(x: Array, eps: float) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: Array = (x - mean) / np.sqrt(var + eps)
    return out


def gelu(x: Array) -> Array:
    """The exact (erf) GELU; erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7)."""
    z = np.abs(x) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = np.zeros_like(t)
    for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly = (poly + c) * t
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    out: Array = 0.5 * x * (1.0 + erf)
    return out


def softmax(x: Array) -> Array:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    out: Array = e / e.sum(axis=-1, keepdims=True)
    return out


# -- the backbone -------------------------------------------------------------------


def rope_tables(positions: Array, head_dim: int) -> tuple[Array, Array]:
    """cos and sin of DA3's 2D RoPE for (N, 2) integer (y, x) positions: (2, N, d/2)
    each, the first row for the y half of a head, the second for the x half."""
    half = head_dim // 2
    inv_freq = 1.0 / ROPE_BASE ** (np.arange(0, half, 2, dtype=np.float64) / half)
    angles = positions.T[:, :, None].astype(np.float64) * inv_freq  # (2, N, d/4)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """x (heads, N, d): each half of a head rotated by its axis's angles."""
    out = []
    for axis, part in enumerate(np.split(x, 2, axis=-1)):
        a, b = np.split(part, 2, axis=-1)
        out.append(part * cos[axis] + np.concatenate([-b, a], axis=-1) * sin[axis])
    return np.concatenate(out, axis=-1)


def attention(t: Tensors, i: int, x: Array, rope: tuple[Array, Array] | None) -> Array:
    n = x.shape[0]
    name = f"backbone.pretrained.blocks.{i}.attn"
    qkv = t.linear(x, f"{name}.qkv").reshape(n, 3, HEADS, DIM // HEADS).transpose(1, 2, 0, 3)
    q, k, v = qkv
    if i >= QK_NORM_START:
        q, k = t.norm(q, f"{name}.q_norm", NORM_EPS), t.norm(k, f"{name}.k_norm", NORM_EPS)
    if rope is not None:
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    weights = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(DIM // HEADS))
    return t.linear((weights @ v).transpose(1, 0, 2).reshape(n, DIM), f"{name}.proj")


def block(t: Tensors, i: int, x: Array, rope: tuple[Array, Array] | None) -> Array:
    name = f"backbone.pretrained.blocks.{i}"
    x = x + t(f"{name}.ls1.gamma") * attention(t, i, t.norm(x, f"{name}.norm1", BLOCK_EPS), rope)
    hidden = gelu(t.linear(t.norm(x, f"{name}.norm2", BLOCK_EPS), f"{name}.mlp.fc1"))
    return x + t(f"{name}.ls2.gamma") * t.linear(hidden, f"{name}.mlp.fc2")


def tokens(t: Tensors, image: Array) -> Array:
    """Patch embedding, the class token and the resampled position embedding."""
    _, height, width = image.shape
    ph, pw = height // PATCH, width // PATCH
    patches = image.reshape(3, ph, PATCH, pw, PATCH).transpose(1, 3, 0, 2, 4)
    kernel = t("backbone.pretrained.patch_embed.proj.weight").reshape(DIM, -1)
    x = patches.reshape(ph * pw, -1) @ kernel.T + t("backbone.pretrained.patch_embed.proj.bias")
    x = np.concatenate([t("backbone.pretrained.cls_token")[0], x])
    pos = t.release.get(PREFIX + "backbone.pretrained.pos_embed")
    out: Array = x + resample_pos_embed(pos, height, width)[0].astype(np.float64)
    return out


def backbone(t: Tensors, image: Array) -> list[Array]:
    """The four (patches, 768) features the head takes: the last local block's tokens
    beside the current ones, the latter through the final norm."""
    _, height, width = image.shape
    ph, pw = height // PATCH, width // PATCH
    grid = np.stack(np.meshgrid(np.arange(ph), np.arange(pw), indexing="ij"), -1).reshape(-1, 2)
    special = np.zeros((1, 2), dtype=np.int64)
    local = rope_tables(np.concatenate([special, grid + 1]), DIM // HEADS)
    shared = rope_tables(np.concatenate([special, np.ones_like(grid)]), DIM // HEADS)
    x = tokens(t, image)
    local_x, feats = x, []
    for i in range(DEPTH):
        if i == ALT_START:  # the reference view's camera token replaces the class token
            x = np.concatenate([t("backbone.pretrained.camera_token")[0, :1], x[1:]])
        is_global = i >= ALT_START and i % 2 == 1
        rope = None if i < ROPE_START else shared if is_global else local
        x = block(t, i, x, rope)
        if not is_global:
            local_x = x
        if i in OUT_LAYERS:
            normed = t.norm(x, "backbone.pretrained.norm", NORM_EPS)
            feats.append(np.concatenate([local_x, normed], axis=-1)[1:])
    return feats


# -- the head -----------------------------------------------------------------------


def conv(x: Array, weight: Array, bias: Array | None, stride: int = 1) -> Array:
    """A 2D convolution of (C, H, W) by (O, C, k, k), padding k // 2."""
    k = weight.shape[-1]
    pad = k // 2
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    windows = sliding_window_view(padded, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    out = np.tensordot(weight, windows, axes=([1, 2, 3], [0, 3, 4]))
    return out if bias is None else out + bias[:, None, None]


def conv_transpose(x: Array, weight: Array, bias: Array) -> Array:
    """A transposed convolution whose stride is its kernel size, no padding."""
    k = weight.shape[-1]
    _, h, w = x.shape
    out = np.einsum("chw,coyx->ohywx", x, weight).reshape(weight.shape[1], h * k, w * k)
    result: Array = out + bias[:, None, None]
    return result


def resize(x: Array, size: tuple[int, int]) -> Array:
    """Bilinear resizing with align_corners=True, one axis after the other."""
    for axis, n_out in ((1, size[0]), (2, size[1])):
        n_in = x.shape[axis]
        src = np.arange(n_out) * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (src - lo).reshape([-1 if a == axis else 1 for a in range(3)])
        x = np.take(x, lo, axis=axis) * (1 - frac) + np.take(x, hi, axis=axis) * frac
    return x


def uv_embedding(channels: int, h: int, w: int, aspect: float) -> Array:
    """The head's sin/cos embedding of the UV grid, times 0.1: (channels, h, w)."""
    diag = (aspect**2 + 1.0) ** 0.5
    span_x, span_y = aspect / diag, 1.0 / diag
    xs = np.linspace(-span_x * (w - 1) / w, span_x * (w - 1) / w, w)
    ys = np.linspace(-span_y * (h - 1) / h, span_y * (h - 1) / h, h)
    quarter = channels // 4
    omega = 1.0 / 100.0 ** (np.arange(quarter, dtype=np.float64) / quarter)

    def embed(pos: Array) -> Array:
        angles = pos[:, None] * omega
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (n, channels / 2)

    ex, ey = embed(xs), embed(ys)
    columns = np.broadcast_to(ex.T[:, None, :], (channels // 2, h, w))
    rows = np.broadcast_to(ey.T[:, :, None], (channels // 2, h, w))
    return np.concatenate([columns, rows]) * 0.1


def residual_unit(t: Tensors, name: str, x: Array) -> Array:
    out = conv(np.maximum(x, 0), t(f"{name}.conv1.weight"), t(f"{name}.conv1.bias"))
    return conv(np.maximum(out, 0), t(f"{name}.conv2.weight"), t(f"{name}.conv2.bias")) + x


def fuse(t: Tensors, n: int, x: Array, lateral: Array | None, size: tuple[int, int]) -> Array:
    name = f"head.scratch.refinenet{n}"
    if lateral is not None:
        x = x + residual_unit(t, f"{name}.resConfUnit1", lateral)
    x = resize(residual_unit(t, f"{name}.resConfUnit2", x), size)
    return conv(x, t(f"{name}.out_conv.weight"), t(f"{name}.out_conv.bias"))


def head(t: Tensors, feats: list[Array], height: int, width: int) -> tuple[Array, Array]:
    ph, pw = height // PATCH, width // PATCH
    levels = []
    for stage, feat in enumerate(feats):
        x = t.norm(feat, "head.norm", NORM_EPS).T.reshape(-1, ph, pw)
        name = f"head.projects.{stage}"
        x = conv(x, t(f"{name}.weight"), t(f"{name}.bias"))
        x = x + uv_embedding(x.shape[0], ph, pw, width / height)
        name = f"head.resize_layers.{stage}"
        if stage < 2:
            x = conv_transpose(x, t(f"{name}.weight"), t(f"{name}.bias"))
        elif stage == 3:
            x = conv(x, t(f"{name}.weight"), t(f"{name}.bias"), stride=2)
        levels.append(conv(x, t(f"head.scratch.layer{stage + 1}_rn.weight"), None))
    l1, l2, l3, l4 = levels
    out = fuse(t, 4, l4, None, l3.shape[1:])
    out = fuse(t, 3, out, l3, l2.shape[1:])
    out = fuse(t, 2, out, l2, l1.shape[1:])
    out = fuse(t, 1, out, l1, (l1.shape[1] * 2, l1.shape[2] * 2))
    name = "head.scratch.output_conv"
    out = conv(out, t(f"{name}1.weight"), t(f"{name}1.bias"))
    out = resize(out, (ph * PATCH, pw * PATCH))
    out = out + uv_embedding(out.shape[0], ph * PATCH, pw * PATCH, width / height)
    out = np.maximum(conv(out, t(f"{name}2.0.weight"), t(f"{name}2.0.bias")), 0)
    logits = conv(out, t(f"{name}2.2.weight"), t(f"{name}2.2.bias"))
    return np.exp(logits[0]), np.exp(logits[1]) + 1


def depth(release: Release, image: Array) -> tuple[Array, Array]:
    """Depth and confidence (each (H, W), float64) of one ImageNet-normalised (3, H, W)
    image, H and W multiples of 14."""
    t = Tensors(release)
    _, height, width = image.shape
    return head(t, backbone(t, image.astype(np.float64)), height, width)
