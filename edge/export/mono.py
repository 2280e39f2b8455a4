"""The monocular DA3 network, rewritten for a fixed input shape so it exports.

The official forward cannot go through ``torch.export``: RoPE calls
``int(positions.max())`` on a tensor, the camera token is written in place, and the
ray head and camera decoder run although monocular depth discards them. ``MonoDepth``
keeps every weight-bearing module of the official network and calls it the same way,
but precomputes what depends only on the input shape (the bicubic position-embedding
interpolation, the RoPE cos/sin tables, the head's UV embeddings) and drops the ray
branch and the camera encoder/decoder. It computes the official ``depth`` and
``depth_conf`` outputs; ``tests/test_parity.py`` checks the cores exported from it
against the reference package's own forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edge.release import fold_norm, resample_pos_embed, rope_tables, uv_embedding_parts

PATCH = 14


def _rope_tables(rope: nn.Module, positions: Tensor, head_dim: int) -> tuple[Tensor, ...]:
    """The cos/sin rows the official RoPE would look up for ``positions`` ((N, 2)
    integer (y, x)): cos_y, sin_y, cos_x, sin_x, each (1, 1, N, head_dim // 2), computed
    by the numpy function ``models build``'s templates hold the result of (float64, one
    rounding: the same bytes on every machine)."""
    tables = rope_tables(positions.numpy(), head_dim, float(rope.base_frequency))
    return tuple(torch.from_numpy(t) for t in tables)


def _rotate(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _apply_rope(x: Tensor, cy: Tensor, sy: Tensor, cx: Tensor, sx: Tensor) -> Tensor:
    """The official 2D RoPE with its tables looked up in advance (same op order)."""
    vertical, horizontal = x.chunk(2, dim=-1)
    vertical = (vertical * cy) + (_rotate(vertical) * sy)
    horizontal = (horizontal * cx) + (_rotate(horizontal) * sx)
    return torch.cat((vertical, horizontal), dim=-1)


def _separable_uv_embedding(
    channels: int, ph: int, pw: int, height: int, width: int
) -> tuple[Tensor, Tensor]:
    """The head's UV sin/cos embedding as a column part and a row part.

    ``DualDPT._add_pos_embed`` adds an (C, h, w) embedding whose first half of channels
    depends only on the column and the second half only on the row. At full resolution
    that is a 48 MB constant. Stored as a (1, C/2, 1, w) column part added to the first
    half of the channels and a (1, C/2, h, 1) row part added to the second half, it is a
    few kilobytes and adds the same numbers. (Zero-padded full-channel parts get folded
    back into the full constant by the converter; slicing the channels keeps it small.)
    Computed by ``edge.release.uv_embedding_parts`` (float64, one rounding), which
    tests/test_release.py checks against the official functions.
    """
    cols, rows = uv_embedding_parts(channels, ph, pw, height, width)
    return torch.from_numpy(cols), torch.from_numpy(rows)


def _plain_norm(norm: nn.Module, x: Tensor) -> Tensor:
    """A LayerNorm without its scale and shift."""
    return F.layer_norm(x, norm.normalized_shape, None, None, norm.eps)


class MonoDepth(nn.Module):
    """Depth and confidence of one image at a fixed (height, width).

    Input: (1, 3, height, width) float32, ImageNet-normalised RGB.
    Output: depth (1, height, width) and confidence (1, height, width), float32.
    """

    def __init__(self, net: nn.Module, height: int, width: int, n_blocks: int | None = None):
        super().__init__()
        if height % PATCH or width % PATCH:
            raise ValueError(f"input size {height}x{width} is not a multiple of {PATCH}")
        self.height, self.width = height, width
        vit = net.backbone.pretrained
        self.vit = vit
        self.head = net.head
        if (self.head.activation, self.head.conf_activation) != ("exp", "expp1"):
            raise ValueError("MonoDepth expects the DualDPT exp / expp1 activations of DA3")
        self.out_layers = list(net.backbone.out_layers)
        self.cat_token = bool(vit.cat_token)
        self.alt_start = int(vit.alt_start)
        self.rope_start = int(vit.rope_start)
        self.n_run = max(self.out_layers) + 1 if n_blocks is None else n_blocks
        ph, pw = height // PATCH, width // PATCH
        self.ph, self.pw = ph, pw
        n_tokens = 1 + ph * pw
        dim = vit.embed_dim
        head_dim = dim // vit.num_heads

        with torch.no_grad():
            # Position embedding: the official bicubic interpolation, done once, by the
            # numpy function `da3-edge models build` runs too (float64, rounded once:
            # within 2e-7 of torch's float32 one, and the same bytes in both builds).
            pos_embed = resample_pos_embed(vit.pos_embed.detach().numpy(), height, width)
            if pos_embed.shape[1] != n_tokens:
                raise AssertionError(
                    "position embedding rows != tokens; the wrapper needs updating"
                )
            self.register_buffer("pos_embed", torch.from_numpy(pos_embed), persistent=False)

            # RoPE positions as _prepare_rope builds them for B = S = 1: patches at
            # (y + 1, x + 1) for local blocks, all at (1, 1) for global ones; the
            # class/camera token at (0, 0) in both.
            grid = torch.cartesian_prod(torch.arange(ph), torch.arange(pw)) + 1
            special = torch.zeros(1, 2, dtype=grid.dtype)
            local_pos = torch.cat([special, grid])
            global_pos = torch.cat([special, torch.ones_like(grid)])
            rope = vit.rope
            if rope is not None:
                for name, pos in (("local", local_pos), ("global", global_pos)):
                    tables = _rope_tables(rope, pos, head_dim)
                    for tname, t in zip(("cy", "sy", "cx", "sx"), tables, strict=True):
                        self.register_buffer(f"rope_{name}_{tname}", t.clone(), persistent=False)

            self._fold_norms()
            # Head UV embeddings, one pair per stage resolution and one at full size.
            head = self.head
            for stage, project in enumerate(head.projects):
                cols, rows = _separable_uv_embedding(project.out_channels, ph, pw, height, width)
                self.register_buffer(f"pe{stage}_cols", cols, persistent=False)
                self.register_buffer(f"pe{stage}_rows", rows, persistent=False)
            feat = head.scratch.output_conv1.out_channels
            h_out, w_out = ph * PATCH, pw * PATCH
            cols, rows = _separable_uv_embedding(feat, h_out, w_out, height, width)
            self.register_buffer("pe_out_cols", cols, persistent=False)
            self.register_buffer("pe_out_rows", rows, persistent=False)

    def _fold_norms(self) -> None:
        """Each block's norm1 and norm2 scale and shift folded into the qkv and fc1
        linears after them, by the numpy function `models build` runs (the converter
        folds them otherwise, with sums in an order of its own)."""
        for i in range(self.n_run):
            blk = self.vit.blocks[i]
            for norm, linear, tag in (
                (blk.norm1, blk.attn.qkv, "qkv"),
                (blk.norm2, blk.mlp.fc1, "fc1"),
            ):
                params = (linear.weight, linear.bias, norm.weight, norm.bias)
                w, b = fold_norm(*(p.detach().numpy() for p in params))
                self.register_buffer(f"fold{i}_{tag}_w", torch.from_numpy(w), persistent=False)
                self.register_buffer(f"fold{i}_{tag}_b", torch.from_numpy(b), persistent=False)

    # -- backbone ---------------------------------------------------------------
    def _attention(
        self, attn: nn.Module, x: Tensor, rope: tuple[Tensor, ...] | None, i: int
    ) -> Tensor:
        B, N, C = x.shape
        qkv = F.linear(x, getattr(self, f"fold{i}_qkv_w"), getattr(self, f"fold{i}_qkv_b"))
        qkv = qkv.reshape(B, N, 3, attn.num_heads, C // attn.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q, k = attn.q_norm(q), attn.k_norm(k)
        if rope is not None:
            q = _apply_rope(q, *rope)
            k = _apply_rope(k, *rope)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, N, C)
        return attn.proj(x)

    def _block(self, i: int, x: Tensor, rope: tuple[Tensor, ...] | None) -> Tensor:
        """Block ``i``; its norms' scale and shift are in the folded linears."""
        blk = self.vit.blocks[i]
        if blk.attn.rope is None:
            rope = None
        x = x + blk.ls1(self._attention(blk.attn, _plain_norm(blk.norm1, x), rope, i))
        h = F.linear(
            _plain_norm(blk.norm2, x),
            getattr(self, f"fold{i}_fc1_w"),
            getattr(self, f"fold{i}_fc1_b"),
        )
        return x + blk.ls2(blk.mlp.fc2(blk.mlp.act(h)))

    def _rope(self, kind: str) -> tuple[Tensor, ...] | None:
        if self.vit.rope is None:
            return None
        return tuple(getattr(self, f"rope_{kind}_{t}") for t in ("cy", "sy", "cx", "sx"))

    def backbone(self, image: Tensor) -> list[Tensor]:
        vit = self.vit
        x = vit.patch_embed(image)
        cls = vit.cls_token.expand(1, -1, -1)
        x = torch.cat((cls, x), dim=1)
        x = x + self.pos_embed
        outputs = []
        local_x = x
        for i in range(self.n_run):
            if self.alt_start != -1 and i == self.alt_start:
                # Official code writes x[:, :, 0] = camera_token[:, :1] (the reference
                # view token; one view here) in place; concatenation exports cleanly.
                x = torch.cat((vit.camera_token[:, :1], x[:, 1:]), dim=1)
            is_global = self.alt_start != -1 and i >= self.alt_start and i % 2 == 1
            use_rope = i >= self.rope_start
            if is_global:
                x = self._block(i, x, self._rope("global") if use_rope else None)
            else:
                x = self._block(i, x, self._rope("local") if use_rope else None)
                local_x = x
            if i in self.out_layers:
                outputs.append(torch.cat((local_x, x), dim=-1) if self.cat_token else x)
        dim = vit.embed_dim
        feats = []
        for out in outputs:
            if out.shape[-1] == dim:
                out = vit.norm(out)
            else:
                out = torch.cat((out[..., :dim], vit.norm(out[..., dim:])), dim=-1)
            feats.append(out[:, 1:])
        return feats

    # -- head -------------------------------------------------------------------
    def _pe(self, x: Tensor, name: str) -> Tensor:
        cols, rows = getattr(self, f"{name}_cols"), getattr(self, f"{name}_rows")
        half = cols.shape[1]
        return torch.cat((x[:, :half] + cols, x[:, half:] + rows), dim=1)

    def head_forward(self, feats: list[Tensor]) -> tuple[Tensor, Tensor]:
        head = self.head
        B = 1
        resized = []
        for stage, take in enumerate(head.intermediate_layer_idx):
            x = head.norm(feats[take])
            x = x.permute(0, 2, 1).reshape(B, x.shape[-1], self.ph, self.pw)
            x = head.projects[stage](x)
            if head.pos_embed:
                x = self._pe(x, f"pe{stage}")
            resized.append(head.resize_layers[stage](x))
        s = head.scratch
        l1, l2, l3, l4 = (
            s.layer1_rn(resized[0]),
            s.layer2_rn(resized[1]),
            s.layer3_rn(resized[2]),
            s.layer4_rn(resized[3]),
        )
        out = s.refinenet4(l4, size=l3.shape[2:])
        out = s.refinenet3(out, l3, size=l2.shape[2:])
        out = s.refinenet2(out, l2, size=l1.shape[2:])
        out = s.refinenet1(out, l1)
        out = s.output_conv1(out)
        out = F.interpolate(
            out, (self.ph * PATCH, self.pw * PATCH), mode="bilinear", align_corners=True
        )
        if head.pos_embed:
            out = self._pe(out, "pe_out")
        logits = s.output_conv2(out)
        depth = torch.exp(logits[:, 0])
        conf = torch.exp(logits[:, 1]) + 1
        return depth, conf

    def forward(self, image: Tensor) -> tuple[Tensor, Tensor]:
        return self.head_forward(self.backbone(image))
