"""Build the DA3-small network and fill it: official weights, or seeded random ones.

Official weights come in the release layout that ``PyTorchModelHubMixin`` writes:
a folder with ``config.json`` (``{"model_name": "da3-small"}``) and
``model.safetensors`` holding the network's state dict under the prefix ``model.``.
``--weights`` accepts that folder or the ``.safetensors`` file itself; without it the
folder is fetched from the hub repo ``depth-anything/da3-small`` (needs network and
``huggingface_hub``).

Random weights exist for tests and benchmarks, where the real ones cannot be had. The
network's own init gives an almost flat depth map (std ~0.006), on which parity
proves nothing, so ``random_state`` uses a DINOv2-like init (truncated normal
linears, small layer scales, a noisy position embedding) and then calibrates the last
convolution on two synthetic images so that log-depth and log-confidence have a
spread comparable to a real model's. The result is deterministic for a seed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from edge import atomic
from edge.errors import WeightsError, first_line
from edge.models import sha256_file
from edge.release import HUB_REPO, MODEL_NAME, WEIGHTS_FILE, Release, resolve_weights_file
from edge.stages import MEAN, STD

__all__ = ["MODEL_NAME", "resolve_weights_file"]


@dataclass(frozen=True)
class Weights:
    """A filled network and where its numbers came from."""

    net: nn.Module
    provenance: str  # "sha256:<hex>" of the weights file, or "random-init:<seed>"
    random_init: bool
    source: str  # a path, a hub repo id, or "random-init:<seed>"


def build_network() -> nn.Module:
    """The official DA3-small network, untrained, built by the reference package."""
    from depth_anything_3.cfg import create_object, load_config
    from depth_anything_3.registry import MODEL_REGISTRY

    return create_object(load_config(MODEL_REGISTRY[MODEL_NAME])).eval()


def download_weights(cache_dir: Path | None = None) -> Path:
    """Fetch the official release folder from the hub; return the weights file."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise WeightsError(
            "downloading weights needs huggingface_hub (pip install huggingface_hub), "
            "or pass --weights PATH to a local model.safetensors"
        ) from exc
    try:
        folder = snapshot_download(
            HUB_REPO,
            allow_patterns=["config.json", WEIGHTS_FILE],
            cache_dir=None if cache_dir is None else str(cache_dir),
        )
    except Exception as exc:  # hub errors are many and version-dependent
        raise WeightsError(
            f"could not download {HUB_REPO} ({type(exc).__name__}: {exc}); "
            "pass --weights PATH to a local copy of the release"
        ) from exc
    return resolve_weights_file(Path(folder))


class _Release(nn.Module):
    """The object PyTorchModelHubMixin saves: the network under the attribute
    ``model``, hence the ``model.`` prefix of every tensor name."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.model = net


def load_official(path: Path, digest: str | None = None) -> Weights:
    """Load release weights into the reference network, strictly (``digest``: the
    file's SHA-256 when the caller has it already; a 137 MB file is not read twice).

    The release is written with ``safetensors.torch.save_model``, which stores a
    tensor shared by several modules once (DA3's aux head reuses one LayerNorm), so it
    is read back with ``load_model``, which knows about those aliases.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    file = resolve_weights_file(path)
    net = build_network()
    try:
        missing, unexpected = load_model(_Release(net), str(file), strict=False)
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise WeightsError(
            f"{file}: not readable as {MODEL_NAME} weights ({first_line(exc)})"
        ) from None
    unexpected = _drop_stored_aliases(file, _Release(net), unexpected)
    if missing or unexpected:
        raise WeightsError(
            f"{file}: does not match {MODEL_NAME} "
            f"({len(missing)} missing, e.g. {sorted(missing)[:3]}; "
            f"{len(unexpected)} unexpected, e.g. {sorted(unexpected)[:3]})"
        )
    seed = random_seed_of(file)
    digest = digest or sha256_file(file)
    return Weights(net.eval(), f"sha256:{digest}", seed is not None, str(file))


def _drop_stored_aliases(file: Path, module: nn.Module, unexpected: list[str]) -> list[str]:
    """``unexpected`` less the names that are aliases of a shared tensor, stored again.

    Files made by cloning the state dict and saving it with ``save_file`` (common in
    community conversions) store each alias of a shared tensor (DA3's aux head reuses
    one LayerNorm) as a tensor of its own; ``load_model`` then reports the aliases as
    unexpected, where the official ``from_pretrained`` (non-strict) accepts the file.
    Accept them when every stored alias equals the others of its group; refuse the file,
    naming the key, when one differs: which copy is the model's would be a guess.
    """
    from safetensors import safe_open

    if not unexpected:
        return unexpected
    state = module.state_dict(keep_vars=True)
    groups: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for name in sorted(state):
        tensor = state[name]
        groups.setdefault((tensor.data_ptr(), tuple(tensor.shape)), []).append(name)
    alias_group = {name: names for names in groups.values() if len(names) > 1 for name in names}
    left = [name for name in unexpected if name not in alias_group]
    aliases = sorted(set(unexpected) - set(left))
    with safe_open(str(file), framework="pt") as stored:
        keys = set(stored.keys())
        for name in aliases:
            canonical = next((n for n in alias_group[name] if n in keys and n != name), None)
            if canonical is None:
                continue
            if not torch.equal(stored.get_tensor(name), stored.get_tensor(canonical)):
                raise WeightsError(
                    f"{file}: {name} is stored as an alias of {canonical} but differs from it"
                )
    return left


def random_seed_of(file: Path) -> str | None:
    """The seed recorded by ``save_official_layout`` in a random-weights file, if any:
    random weights handed over as a file stay flagged."""
    with Release(file) as release:
        return release.random_seed()


# -- seeded random weights ---------------------------------------------------------


def _synthetic_images(height: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """Two smooth, structured, ImageNet-normalised images for calibration."""
    ys = torch.linspace(-1, 1, height)[:, None]
    xs = torch.linspace(-1, 1, width)[None, :]
    images = []
    for k in range(2):
        phase = torch.rand(3, generator=generator) * 6.28
        freq = 1.5 + 3 * torch.rand(3, generator=generator)
        channels = [
            0.5
            + 0.35 * torch.sin(freq[c] * (xs * (1 + k) + ys * (2 - k)) + phase[c])
            + 0.15 * torch.cos(3 * freq[c] * ys * xs)
            for c in range(3)
        ]
        img = torch.stack(channels).clamp(0, 1)
        mean = torch.tensor(MEAN)[:, None, None]
        std = torch.tensor(STD)[:, None, None]
        images.append((img - mean) / std)
    return torch.stack(images)[:, None]  # (2, 1, 3, H, W)


def random_state(seed: int, calibration_size: tuple[int, int] = (140, 182)) -> nn.Module:
    """A DA3-small network with seeded, non-degenerate random weights."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # module constructors draw from the global generator
    net = build_network()

    def trunc_normal(t: torch.Tensor, std: float) -> None:
        t.copy_(torch.randn(t.shape, generator=generator).clamp_(-2, 2) * std)

    # No two tensors alike (small noise on biases, norms and layer scales), as in a
    # trained release: the LiteRT converter stores equal constants once, so weights
    # with repeated tensors convert to another graph than real ones do, and the
    # graph `models build` fills would not be the one the export writes.
    def around(t: torch.Tensor, centre: float, std: float) -> None:
        trunc_normal(t, std)
        t.add_(centre)

    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, nn.Linear):
                trunc_normal(module.weight, 0.02)
                if module.bias is not None:
                    around(module.bias, 0.0, 0.002)
            elif isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
                fan_in = module.weight[0].numel()
                trunc_normal(module.weight, (2.0 / fan_in) ** 0.5)
                if module.bias is not None:
                    around(module.bias, 0.0, 0.002)
            elif isinstance(module, nn.LayerNorm) and module.elementwise_affine:
                around(module.weight, 1.0, 0.01)
                around(module.bias, 0.0, 0.002)
        for name, param in net.named_parameters():
            if name.endswith(("ls1.gamma", "ls2.gamma")):
                around(param, 0.1, 0.005)
            elif name.endswith("pos_embed") or name.endswith(("cls_token", "camera_token")):
                trunc_normal(param, 0.02)

        # Calibrate the final 1x1 convolution: standardise each output channel's
        # logits over the calibration images, then give depth a spread of 0.5 and
        # confidence a spread of 0.4 around 1.0 (log units).
        last = net.head.scratch.output_conv2[-1]
        images = _synthetic_images(*calibration_size, generator)
        logits = []
        hook = last.register_forward_hook(lambda m, i, o: logits.append(o.detach()))
        for k in range(images.shape[0]):
            net(images[k : k + 1])
        hook.remove()
        out = torch.cat(logits)  # (2, 2, h, w) pre-activation
        mean = out.mean(dim=(0, 2, 3))
        std = out.std(dim=(0, 2, 3)).clamp_min(1e-12)
        target_std = torch.tensor([0.5, 0.4])
        target_mean = torch.tensor([0.0, 1.0])
        scale = target_std / std
        last.weight.mul_(scale[:, None, None, None])
        last.bias.copy_((last.bias - mean) * scale + target_mean)
    return net.eval()


def random_init(seed: int) -> Weights:
    return Weights(random_state(seed), f"random-init:{seed}", True, f"random-init:{seed}")


def _dedup_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """State dict with each shared tensor stored once, under its first name in sorted
    order (as ``safetensors.torch.save_model`` does, but deterministically: its
    choice among aliases follows set order, which changes with the hash seed, and
    would change the file's SHA-256 from run to run)."""
    kept: dict[tuple[int, tuple[int, ...]], str] = {}
    state = module.state_dict()
    for name in sorted(state):
        tensor = state[name]
        key = (tensor.data_ptr(), tuple(tensor.shape))
        kept.setdefault(key, name)
    return {name: state[name].detach().contiguous() for name in sorted(kept.values())}


def save_official_layout(net: nn.Module, folder: Path, *, random_seed: int | None) -> Path:
    """Write ``net`` as a release folder (config.json + model.safetensors).

    Used to hand seeded random weights to ``--weights`` exactly like real ones. The
    config records the seed so nobody mistakes the folder for the real release.
    """
    from safetensors.torch import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / WEIGHTS_FILE
    # One metadata key at most: safetensors writes the metadata map in hash order, so
    # two keys would make the file's bytes (and SHA-256) differ between runs.
    metadata = {"format": "pt"} if random_seed is None else {"random_init_seed": str(random_seed)}
    atomic.write_bytes(target, save(_dedup_state(_Release(net)), metadata=metadata))
    config = {"model_name": MODEL_NAME}
    if random_seed is not None:
        config["random_init_seed"] = random_seed
    atomic.write_bytes(folder / "config.json", (json.dumps(config) + "\n").encode())
    return target
