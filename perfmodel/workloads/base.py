"""What every workload provides: a config protocol and the built training step."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

#: Synthetic batches generated up front and cycled through, so that
#: generating data is never part of a timed iteration.
DATA_BATCHES = 4


@dataclass
class TrainingStep:
    """One built workload on a device: ``step()`` runs one training iteration.

    ``step`` zeroes the gradients (``set_to_none=True``), runs forward, loss,
    backward and ``optimizer.step()``, and returns the loss as a 0-d tensor
    without synchronising the device. ``items`` is the samples per iteration.
    """

    name: str
    model: torch.nn.Module
    step: Callable[[], torch.Tensor]
    items: int


class WorkloadConfig(Protocol):
    """A frozen dataclass that describes one workload and builds it."""

    name: str
    #: Samples per iteration.
    batch: int
    #: ``"mlp"``, ``"dlrm"``, ``"cnn"``, ``"transformer"`` or ``"hf"``.
    kind: str

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The workload on ``device``, weights and data drawn from ``seed``."""

    def tiny(self) -> WorkloadConfig:
        """A miniature variant for tests and smoke runs."""

    def full_size(self) -> WorkloadConfig:
        """A larger variant sized for one data-centre GPU."""


def cycle_batches(batches: Sequence[Any]) -> Callable[[], Any]:
    """A function returning the next of ``batches``, round-robin."""
    it: Iterator[Any] = itertools.cycle(batches)
    return lambda: next(it)


def training_step(name: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  loss_of: Callable[[], torch.Tensor], items: int) -> TrainingStep:
    """A :class:`TrainingStep` whose iteration is zero_grad, ``loss_of()``
    (forward and loss), backward and ``optimizer.step()``."""

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        optimizer.step()
        return loss.detach()

    model.train()
    return TrainingStep(name, model, step, items)
