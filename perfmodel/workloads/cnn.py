"""Image classifiers: a ResNet with bottleneck blocks and a MobileNet (v1) with
depthwise separable convolutions, on random images and labels.

``architecture`` picks the network (``kind`` is ``"cnn"`` for both).
Stage ``i`` of ``depth`` holds ``depth[i]`` blocks; the first block of every
stage after the first halves the resolution (stride 2).

- ``resnet_bottleneck``: stem of ``width`` channels; block 1x1 -> 3x3 -> 1x1
  conv, each with BatchNorm, ReLU after the first two and after the residual
  add, and a 1x1 projection shortcut (conv + BN) where the shape changes.
  Stage ``i`` runs ``width·2^i`` channels inside a block and ``4·width·2^i``
  between blocks (ResNet-50: ``width=64, depth=(3, 4, 6, 3)``).
- ``depthwise_separable``: stem of ``width`` channels; block depthwise 3x3
  conv (``groups=channels``) + BN + ReLU, then pointwise 1x1 conv + BN + ReLU.
  Stage ``i`` outputs ``2·width·2^i`` channels (MobileNet v1:
  ``width=32, depth=(1, 2, 2, 6, 2)``).

Both end in global average pooling, a Linear head and cross-entropy. The
stem is a 3x3 conv at stride 1 (small images), or with ``imagenet_stem`` the
ImageNet one: 7x7 stride 2 + 3x3 max-pool stride 2 (ResNet), 3x3 stride 2
(MobileNet).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from perfmodel.workloads.base import DATA_BATCHES, TrainingStep, cycle_batches, training_step

if TYPE_CHECKING:
    import torch

ARCHITECTURES = ("resnet_bottleneck", "depthwise_separable")
#: Full-size (ImageNet) variants of each architecture.
_FULL_SIZE = {
    "resnet_bottleneck": dict(batch=64, image_size=224, width=64, depth=(3, 4, 6, 3),
                              num_classes=1000, imagenet_stem=True),
    "depthwise_separable": dict(batch=64, image_size=224, width=32, depth=(1, 2, 2, 6, 2),
                                num_classes=1000, imagenet_stem=True),
}


@dataclass(frozen=True)
class CNNConfig:
    """A CNN of ``architecture`` on ``batch`` random RGB images of ``image_size`` pixels square."""

    name: str = "cnn"
    batch: int = 8
    image_size: int = 32
    width: int = 16
    depth: tuple[int, ...] = (1, 1, 1)
    num_classes: int = 10
    architecture: str = "resnet_bottleneck"
    imagenet_stem: bool = False
    lr: float = 0.01
    kind: ClassVar[str] = "cnn"

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {ARCHITECTURES}, "
                             f"got {self.architecture!r}")

    def tiny(self) -> CNNConfig:
        """Batch 2 of 16x16 images, width 4, two stages of one block."""
        return dataclasses.replace(self, name=f"{self.name}_tiny", batch=2, image_size=16,
                                   width=4, depth=(1, 1), num_classes=5, imagenet_stem=False)

    def full_size(self) -> CNNConfig:
        """ResNet-50 or MobileNet v1 on 224x224 ImageNet-shaped data, batch 64."""
        return dataclasses.replace(self, name=f"{self.name}_full", **_FULL_SIZE[self.architecture])

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The CNN on ``device`` with :data:`DATA_BATCHES` synthetic batches."""
        import torch
        import torch.nn.functional as F

        torch.manual_seed(seed)
        model = (_resnet(self) if self.architecture == "resnet_bottleneck" else _mobilenet(self))
        model.to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9, foreach=True)
        shape = (self.batch, 3, self.image_size, self.image_size)
        next_batch = cycle_batches([
            (torch.randn(shape, device=device),
             torch.randint(0, self.num_classes, (self.batch,), device=device))
            for _ in range(DATA_BATCHES)])

        def loss_of() -> torch.Tensor:
            images, labels = next_batch()
            return F.cross_entropy(model(images), labels)

        return training_step(self.name, model, optimizer, loss_of, self.batch)


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1,
             relu: bool = True) -> list:
    """Conv (no bias, "same" padding) and BatchNorm, then ReLU if ``relu``."""
    from torch import nn

    layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(c_out)]
    return layers + [nn.ReLU(inplace=True)] if relu else layers


def _classifier(stem: list, blocks: list, channels: int, num_classes: int) -> torch.nn.Module:
    from torch import nn

    return nn.Sequential(*stem, *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(channels, num_classes))


def _resnet(cfg: CNNConfig) -> torch.nn.Module:
    from torch import nn

    if cfg.imagenet_stem:
        stem = _conv_bn(3, cfg.width, 7, stride=2) + [nn.MaxPool2d(3, 2, 1)]
    else:
        stem = _conv_bn(3, cfg.width, 3)
    blocks, c_in = [], cfg.width
    for stage, n_blocks in enumerate(cfg.depth):
        mid = cfg.width * 2 ** stage
        for i in range(n_blocks):
            blocks.append(_bottleneck_class()(c_in, mid, 2 if stage and not i else 1))
            c_in = 4 * mid
    return _classifier(stem, blocks, c_in, cfg.num_classes)


def _mobilenet(cfg: CNNConfig) -> torch.nn.Module:
    stem = _conv_bn(3, cfg.width, 3, stride=2 if cfg.imagenet_stem else 1)
    blocks, c_in = [], cfg.width
    for stage, n_blocks in enumerate(cfg.depth):
        c_out = 2 * cfg.width * 2 ** stage
        for i in range(n_blocks):
            blocks += _conv_bn(c_in, c_in, 3, stride=2 if stage and not i else 1, groups=c_in)
            blocks += _conv_bn(c_in, c_out, 1)
            c_in = c_out
    return _classifier(stem, blocks, c_in, cfg.num_classes)


@functools.cache
def _bottleneck_class() -> type:
    from torch import nn

    class Bottleneck(nn.Module):
        """1x1 -> 3x3 (carries the stride) -> 1x1 conv, residual add, ReLU."""

        def __init__(self, c_in: int, mid: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(*_conv_bn(c_in, mid, 1), *_conv_bn(mid, mid, 3, stride),
                                      *_conv_bn(mid, 4 * mid, 1, relu=False))
            self.shortcut = (nn.Sequential(*_conv_bn(c_in, 4 * mid, 1, stride, relu=False))
                             if stride != 1 or c_in != 4 * mid else nn.Identity())
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + self.shortcut(x))

    return Bottleneck
