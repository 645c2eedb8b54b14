"""A held-out model zoo: fourteen training steps of kinds the built-in
workloads do not cover, split once into a tuning half and a scoring half.

Each model is a frozen dataclass config like the built-in workloads (``name``,
``batch``, ``kind``, ``build(device, seed=0)``, ``tiny()``, ``full_size()``),
written as people write such models: plain PyTorch modules (``nn.LSTM``,
``nn.Transformer``, ``F.interpolate``, ``index_add_``, ``topk``...) or
HuggingFace ``transformers`` models built from a config with random weights
(never downloaded), synthetic data generated up front (:data:`DATA_BATCHES`
batches, cycled), a realistic loss, and a ``torch.optim`` optimizer (Adam,
AdamW or SGD) with the learning rate, and the momentum or weight decay where
the model's usual recipe sets them, but no ``foreach`` or ``fused``: on a
CPU, the per-parameter loop. The registered size of each takes a
few tens of milliseconds per step on a 2-core CPU; ``tiny()`` is for tests
and ``full_size()`` is sized for one data-centre GPU.

These configs are not in :data:`perfmodel.workloads.WORKLOADS`: they are a
held-out check of the op predictors and the simulator, not a workload to
tune against.

The split (:func:`zoo_half`) was fixed before any prediction error was
looked at, and is mechanical: sort the models by ``(kind, name)`` and deal
them out alternately down that list, the first to ``"tuning"``, the second
to ``"scoring"``, and so on. Sorting by kind first puts every kind with two
or more models in both halves and deals the one-model kinds out in turn, so
each half spans most kinds and the halves differ in size by at most one.
The rule splits each batch of models added to the zoo on its own
(:data:`ZOO_ADDITIONS`), so adding models never moves one already split.
Tune on the tuning half only; never look at the scoring half while a model
change is being made.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from perfmodel.workloads.base import DATA_BATCHES, TrainingStep, cycle_batches

if TYPE_CHECKING:
    import torch

__all__ = ["ZOO_ADDITIONS", "ZOO_CONFIGS", "ZOO_HALVES", "ZOO_KINDS", "ZOO_SPLIT", "get_zoo_config",
           "split_by_rule", "zoo_half"]

#: The two halves of the zoo, in the order the split deals them.
ZOO_HALVES = ("tuning", "scoring")


class _ZooModel:
    """What every zoo config shares: ``tiny()``/``full_size()`` from the
    class's ``_TINY``/``_FULL`` field values, and ``build`` from ``_parts``."""

    kind: ClassVar[str]
    _TINY: ClassVar[dict[str, Any]]
    _FULL: ClassVar[dict[str, Any]]
    name: str
    batch: int

    def tiny(self) -> Any:
        """A miniature variant (``<name>_tiny``) for tests and smoke runs."""
        return dataclasses.replace(self, name=f"{self.name}_tiny", **self._TINY)

    def full_size(self) -> Any:
        """A variant (``<name>_full``) sized for one data-centre GPU."""
        return dataclasses.replace(self, name=f"{self.name}_full", **self._FULL)

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The model on ``device``, weights, data and dropout drawn from ``seed``."""
        import torch

        torch.manual_seed(seed)
        model, optimizer, loss_of, clip = self._parts(device)
        return _training_step(self.name, model, optimizer, loss_of, self.batch, clip)

    def _parts(self, device: str) -> tuple:
        """(model, optimizer, loss_of, gradient-norm clip or None)."""
        raise NotImplementedError


def _training_step(name: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   loss_of: Callable[[], torch.Tensor], items: int,
                   clip: float | None) -> TrainingStep:
    """zero_grad, forward and loss, backward, ``clip_grad_norm_`` when
    ``clip`` is set, ``optimizer.step()``."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        return loss.detach()

    model.train()
    return TrainingStep(name, model, step, items)


def _batches(make: Callable[[], Any]) -> Callable[[], Any]:
    """:data:`DATA_BATCHES` batches from ``make()``, cycled."""
    return cycle_batches([make() for _ in range(DATA_BATCHES)])


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise ImportError("transformers is not installed; pip install transformers") from exc
    return transformers


# -- recurrent -------------------------------------------------------------------------

@dataclass(frozen=True)
class LSTMLMConfig(_ZooModel):
    """A word-level LSTM language model (the PyTorch word_language_model
    example): embedding, dropout, ``layers``-deep ``nn.LSTM``, dropout, a
    vocabulary head; next-token cross-entropy, gradient-norm clipping at 0.25,
    Adam."""

    name: str = "zoo_lstm_lm"
    batch: int = 16
    seq_len: int = 32
    vocab: int = 2000
    embed: int = 128
    hidden: int = 128
    layers: int = 2
    dropout: float = 0.2
    lr: float = 1e-3
    kind: ClassVar[str] = "recurrent"
    _TINY: ClassVar[dict] = dict(batch=2, seq_len=6, vocab=40, embed=8, hidden=8, layers=1)
    #: WikiText-103-sized vocabulary, 2 x 1024 LSTM
    _FULL: ClassVar[dict] = dict(batch=64, seq_len=128, vocab=32000, embed=512, hidden=1024)

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F

        model = _lstm_lm_class()(self).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr)

        def make() -> tuple:
            tokens = torch.randint(0, self.vocab, (self.batch, self.seq_len + 1), device=device)
            return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

        next_batch = _batches(make)

        def loss_of() -> torch.Tensor:
            tokens, targets = next_batch()
            return F.cross_entropy(model(tokens).reshape(-1, self.vocab), targets.reshape(-1))

        return model, optimizer, loss_of, 0.25


@functools.cache
def _lstm_lm_class() -> type:
    from torch import nn

    class LSTMLM(nn.Module):
        def __init__(self, cfg: LSTMLMConfig) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.embed)
            self.drop = nn.Dropout(cfg.dropout)
            self.lstm = nn.LSTM(cfg.embed, cfg.hidden, cfg.layers, batch_first=True,
                                dropout=cfg.dropout if cfg.layers > 1 else 0.0)
            self.head = nn.Linear(cfg.hidden, cfg.vocab)

        def forward(self, tokens):
            out, _ = self.lstm(self.drop(self.embed(tokens)))
            return self.head(self.drop(out))

    return LSTMLM


@dataclass(frozen=True)
class GRUClassifierConfig(_ZooModel):
    """A bidirectional GRU text classifier: embedding, ``nn.GRU``
    (bidirectional), the final hidden states of both directions
    concatenated, dropout, a Linear head; cross-entropy, SGD with momentum."""

    name: str = "zoo_gru_classifier"
    batch: int = 16
    seq_len: int = 32
    vocab: int = 5000
    embed: int = 128
    hidden: int = 128
    layers: int = 1
    num_classes: int = 4
    dropout: float = 0.3
    lr: float = 0.05
    kind: ClassVar[str] = "recurrent"
    _TINY: ClassVar[dict] = dict(batch=2, seq_len=6, vocab=40, embed=8, hidden=8, num_classes=3)
    _FULL: ClassVar[dict] = dict(batch=256, seq_len=256, vocab=50000, embed=300, hidden=512,
                                 layers=2)

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F
        from torch import nn

        class GRUClassifier(nn.Module):
            def __init__(self, cfg: GRUClassifierConfig) -> None:
                super().__init__()
                self.embed = nn.Embedding(cfg.vocab, cfg.embed)
                self.gru = nn.GRU(cfg.embed, cfg.hidden, cfg.layers, batch_first=True,
                                  bidirectional=True)
                self.drop = nn.Dropout(cfg.dropout)
                self.head = nn.Linear(2 * cfg.hidden, cfg.num_classes)

            def forward(self, tokens):
                _, h = self.gru(self.embed(tokens))  # h: (2 * layers, B, hidden)
                return self.head(self.drop(torch.cat([h[-2], h[-1]], dim=1)))

        model = GRUClassifier(self).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)
        next_batch = _batches(lambda: (
            torch.randint(0, self.vocab, (self.batch, self.seq_len), device=device),
            torch.randint(0, self.num_classes, (self.batch,), device=device)))

        def loss_of() -> torch.Tensor:
            tokens, labels = next_batch()
            return F.cross_entropy(model(tokens), labels)

        return model, optimizer, loss_of, None


# -- encoder-decoder ---------------------------------------------------------------------

@dataclass(frozen=True)
class T5Config(_ZooModel):
    """HuggingFace ``T5ForConditionalGeneration`` from a ``T5Config`` (random
    weights): random source and target token sequences, the model's own
    cross-entropy (``labels``), AdamW."""

    name: str = "zoo_t5"
    batch: int = 4
    src_len: int = 24
    tgt_len: int = 12
    vocab: int = 2000
    d_model: int = 128
    d_kv: int = 32
    d_ff: int = 256
    layers: int = 2
    heads: int = 4
    lr: float = 1e-4
    kind: ClassVar[str] = "seq2seq"
    _TINY: ClassVar[dict] = dict(batch=2, src_len=6, tgt_len=4, vocab=40, d_model=16, d_kv=8,
                                 d_ff=32, layers=1, heads=2)
    #: t5-small
    _FULL: ClassVar[dict] = dict(batch=32, src_len=512, tgt_len=128, vocab=32128, d_model=512,
                                 d_kv=64, d_ff=2048, layers=6, heads=8)

    def _parts(self, device: str) -> tuple:
        import torch

        tf = _transformers()
        config = tf.T5Config(vocab_size=self.vocab, d_model=self.d_model, d_kv=self.d_kv,
                             d_ff=self.d_ff, num_layers=self.layers, num_heads=self.heads,
                             decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        model = tf.T5ForConditionalGeneration(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr)
        next_batch = _batches(lambda: (
            torch.randint(2, self.vocab, (self.batch, self.src_len), device=device),
            torch.randint(2, self.vocab, (self.batch, self.tgt_len), device=device)))

        def loss_of() -> torch.Tensor:
            source, target = next_batch()
            return model(input_ids=source, labels=target).loss

        return model, optimizer, loss_of, None


@dataclass(frozen=True)
class Seq2SeqTransformerConfig(_ZooModel):
    """A translation model on ``nn.Transformer`` (batch first): source and
    target embeddings scaled by sqrt(d_model) plus a sinusoidal position
    encoding, a causal target mask, a vocabulary head; label-smoothed
    cross-entropy (0.1) ignoring padding, Adam."""

    name: str = "zoo_seq2seq_transformer"
    batch: int = 4
    src_len: int = 16
    tgt_len: int = 16
    vocab: int = 2000
    d_model: int = 128
    heads: int = 4
    layers: int = 2
    ffn: int = 256
    dropout: float = 0.1
    lr: float = 1e-4
    kind: ClassVar[str] = "seq2seq"
    _TINY: ClassVar[dict] = dict(batch=2, src_len=6, tgt_len=5, vocab=40, d_model=16, heads=2,
                                 layers=1, ffn=32)
    #: Transformer-base (Vaswani et al.)
    _FULL: ClassVar[dict] = dict(batch=64, src_len=128, tgt_len=128, vocab=37000, d_model=512,
                                 heads=8, layers=6, ffn=2048)

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F

        model = _seq2seq_class()(self).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr)
        mask = torch.ones(self.tgt_len, self.tgt_len, dtype=torch.bool, device=device).triu(1)
        pad = 0

        def make() -> tuple:
            source = torch.randint(1, self.vocab, (self.batch, self.src_len), device=device)
            target = torch.randint(1, self.vocab, (self.batch, self.tgt_len + 1), device=device)
            source[:, -2:] = pad  # padded tails, as in a bucketed batch
            target[:, -2:] = pad
            return source, target[:, :-1].contiguous(), target[:, 1:].contiguous()

        next_batch = _batches(make)

        def loss_of() -> torch.Tensor:
            source, target_in, target_out = next_batch()
            logits = model(source, target_in, mask, source == pad, target_in == pad)
            return F.cross_entropy(logits.reshape(-1, self.vocab), target_out.reshape(-1),
                                   ignore_index=pad, label_smoothing=0.1)

        return model, optimizer, loss_of, None


@functools.cache
def _seq2seq_class() -> type:
    import torch
    from torch import nn

    class Seq2SeqTransformer(nn.Module):
        def __init__(self, cfg: Seq2SeqTransformerConfig) -> None:
            super().__init__()
            d = cfg.d_model
            self.scale = math.sqrt(d)
            self.src_embed = nn.Embedding(cfg.vocab, d)
            self.tgt_embed = nn.Embedding(cfg.vocab, d)
            n = max(cfg.src_len, cfg.tgt_len)
            position = torch.arange(n).unsqueeze(1)
            div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
            pe = torch.zeros(n, d)
            pe[:, 0::2] = torch.sin(position * div)
            pe[:, 1::2] = torch.cos(position * div)
            self.register_buffer("pe", pe, persistent=False)
            self.drop = nn.Dropout(cfg.dropout)
            self.transformer = nn.Transformer(d, cfg.heads, cfg.layers, cfg.layers, cfg.ffn,
                                              cfg.dropout, batch_first=True)
            self.head = nn.Linear(d, cfg.vocab)

        def _embed(self, embed: nn.Embedding, tokens):
            return self.drop(embed(tokens) * self.scale + self.pe[:tokens.shape[1]])

        def forward(self, source, target, tgt_mask, src_pad, tgt_pad):
            out = self.transformer(self._embed(self.src_embed, source),
                                   self._embed(self.tgt_embed, target), tgt_mask=tgt_mask,
                                   src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                                   memory_key_padding_mask=src_pad, tgt_is_causal=True)
            return self.head(out)

    return Seq2SeqTransformer


# -- vision ----------------------------------------------------------------------------

@dataclass(frozen=True)
class VGGConfig(_ZooModel):
    """A VGG-style classifier without normalisation: stages of 3x3 conv +
    ReLU, each ended by a 2x2 max-pool, then Linear-ReLU-Dropout twice and a
    Linear head; cross-entropy, SGD with momentum and weight decay.
    ``stages[i]`` lists the conv widths of stage ``i``."""

    name: str = "zoo_vgg"
    batch: int = 16
    image_size: int = 32
    stages: tuple[tuple[int, ...], ...] = ((16,), (32,), (64, 64))
    hidden: int = 256
    num_classes: int = 10
    lr: float = 0.01
    kind: ClassVar[str] = "vision"
    _TINY: ClassVar[dict] = dict(batch=2, image_size=8, stages=((4,), (8,)), hidden=16,
                                 num_classes=3)
    #: VGG-16 on ImageNet-shaped data
    _FULL: ClassVar[dict] = dict(batch=64, image_size=224, hidden=4096, num_classes=1000,
                                 stages=((64, 64), (128, 128), (256, 256, 256),
                                         (512, 512, 512), (512, 512, 512)))

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F
        from torch import nn

        layers: list = []
        c_in = 3
        for widths in self.stages:
            for c_out in widths:
                layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(inplace=True)]
                c_in = c_out
            layers.append(nn.MaxPool2d(2, 2))
        side = self.image_size // 2 ** len(self.stages)
        model = nn.Sequential(
            *layers, nn.Flatten(),
            nn.Linear(c_in * side * side, self.hidden), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(self.hidden, self.hidden), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(self.hidden, self.num_classes)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9,
                                    weight_decay=5e-4)
        next_batch = _batches(lambda: (
            torch.randn(self.batch, 3, self.image_size, self.image_size, device=device),
            torch.randint(0, self.num_classes, (self.batch,), device=device)))

        def loss_of() -> torch.Tensor:
            images, labels = next_batch()
            return F.cross_entropy(model(images), labels)

        return model, optimizer, loss_of, None


@dataclass(frozen=True)
class UNetConfig(_ZooModel):
    """A U-Net for segmentation: ``depth`` down levels of two (3x3 conv,
    GroupNorm, SiLU) blocks and a 2x2 max-pool, channels doubling from
    ``width``; up the other side with a stride-2 ``ConvTranspose2d`` at the
    deepest level and bilinear ``F.interpolate`` + 1x1 conv above it, each
    followed by a skip concatenation and a block; a 1x1 conv head and
    per-pixel cross-entropy, Adam."""

    name: str = "zoo_unet"
    batch: int = 4
    image_size: int = 32
    width: int = 16
    depth: int = 2
    num_classes: int = 4
    lr: float = 1e-3
    kind: ClassVar[str] = "vision"
    _TINY: ClassVar[dict] = dict(batch=1, image_size=8, width=4, depth=2, num_classes=2)
    _FULL: ClassVar[dict] = dict(batch=16, image_size=256, width=64, depth=4, num_classes=21)

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F

        model = _unet_class()(self).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr)
        side = self.image_size
        next_batch = _batches(lambda: (
            torch.randn(self.batch, 3, side, side, device=device),
            torch.randint(0, self.num_classes, (self.batch, side, side), device=device)))

        def loss_of() -> torch.Tensor:
            images, masks = next_batch()
            return F.cross_entropy(model(images), masks)

        return model, optimizer, loss_of, None


@functools.cache
def _unet_class() -> type:
    import torch
    import torch.nn.functional as F
    from torch import nn

    def block(c_in: int, c_out: int) -> nn.Sequential:
        layers: list = []
        for c in (c_in, c_out):
            layers += [nn.Conv2d(c, c_out, 3, padding=1, bias=False),
                       nn.GroupNorm(min(8, c_out), c_out), nn.SiLU(inplace=True)]
        return nn.Sequential(*layers)

    class UNet(nn.Module):
        def __init__(self, cfg: UNetConfig) -> None:
            super().__init__()
            widths = [cfg.width * 2 ** i for i in range(cfg.depth + 1)]
            self.down = nn.ModuleList([block(3, widths[0])] + [
                block(widths[i], widths[i + 1]) for i in range(cfg.depth)])
            self.pool = nn.MaxPool2d(2)
            # up[i] brings widths[i + 1] channels up to widths[i]
            self.up = nn.ModuleList(
                [nn.Conv2d(widths[i + 1], widths[i], 1) for i in range(cfg.depth - 1)]
                + [nn.ConvTranspose2d(widths[-1], widths[-2], 2, stride=2)])
            self.merge = nn.ModuleList([block(2 * widths[i], widths[i])
                                        for i in range(cfg.depth)])
            self.head = nn.Conv2d(widths[0], cfg.num_classes, 1)

        def forward(self, x):
            skips = []
            for i, down in enumerate(self.down):
                x = down(self.pool(x) if i else x)
                skips.append(x)
            x = skips.pop()
            for i in reversed(range(len(self.merge))):
                if isinstance(self.up[i], nn.ConvTranspose2d):
                    x = self.up[i](x)
                else:
                    x = self.up[i](F.interpolate(x, scale_factor=2.0, mode="bilinear",
                                                 align_corners=False))
                x = self.merge[i](torch.cat([skips.pop(), x], dim=1))
            return self.head(x)

    return UNet


@dataclass(frozen=True)
class ViTConfig(_ZooModel):
    """HuggingFace ``ViTForImageClassification`` from a ``ViTConfig`` (random
    weights, SDPA attention) on random images; the model's own cross-entropy
    (``labels``), AdamW."""

    name: str = "zoo_vit"
    batch: int = 8
    image_size: int = 32
    patch_size: int = 4
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    ffn: int = 256
    num_classes: int = 10
    lr: float = 1e-4
    kind: ClassVar[str] = "vision"
    _TINY: ClassVar[dict] = dict(batch=2, image_size=8, patch_size=4, hidden=16, layers=1,
                                 heads=2, ffn=32, num_classes=3)
    #: ViT-B/16
    _FULL: ClassVar[dict] = dict(batch=64, image_size=224, patch_size=16, hidden=768, layers=12,
                                 heads=12, ffn=3072, num_classes=1000)

    def _parts(self, device: str) -> tuple:
        import torch

        tf = _transformers()
        config = tf.ViTConfig(image_size=self.image_size, patch_size=self.patch_size,
                              hidden_size=self.hidden, num_hidden_layers=self.layers,
                              num_attention_heads=self.heads, intermediate_size=self.ffn,
                              num_labels=self.num_classes, attn_implementation="sdpa")
        model = tf.ViTForImageClassification(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr)
        next_batch = _batches(lambda: (
            torch.randn(self.batch, 3, self.image_size, self.image_size, device=device),
            torch.randint(0, self.num_classes, (self.batch,), device=device)))

        def loss_of() -> torch.Tensor:
            images, labels = next_batch()
            return model(pixel_values=images, labels=labels).loss

        return model, optimizer, loss_of, None


# -- language --------------------------------------------------------------------------

@dataclass(frozen=True)
class BertMLMConfig(_ZooModel):
    """HuggingFace ``BertForMaskedLM`` from a ``BertConfig`` (random weights,
    SDPA attention): 15% of the positions of each random sequence replaced
    by the mask token and scored (the other labels are -100), an attention
    mask, AdamW."""

    name: str = "zoo_bert_mlm"
    batch: int = 4
    seq_len: int = 32
    vocab: int = 2000
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    ffn: int = 256
    lr: float = 1e-4
    kind: ClassVar[str] = "language"
    _TINY: ClassVar[dict] = dict(batch=2, seq_len=8, vocab=40, hidden=16, layers=1, heads=2,
                                 ffn=32)
    #: BERT-base
    _FULL: ClassVar[dict] = dict(batch=32, seq_len=512, vocab=30522, hidden=768, layers=12,
                                 heads=12, ffn=3072)

    def _parts(self, device: str) -> tuple:
        import torch

        tf = _transformers()
        config = tf.BertConfig(vocab_size=self.vocab, hidden_size=self.hidden,
                               num_hidden_layers=self.layers, num_attention_heads=self.heads,
                               intermediate_size=self.ffn, max_position_embeddings=self.seq_len,
                               attn_implementation="sdpa")
        model = tf.BertForMaskedLM(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr)
        mask_token = self.vocab - 1

        def make() -> tuple:
            tokens = torch.randint(0, self.vocab - 1, (self.batch, self.seq_len))
            masked = torch.rand(self.batch, self.seq_len) < 0.15
            masked[:, 0] = True  # at least one scored position per sequence
            labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
            tokens[masked] = mask_token
            return (tokens.to(device), torch.ones_like(tokens, device=device),
                    labels.to(device))

        next_batch = _batches(make)

        def loss_of() -> torch.Tensor:
            tokens, attention, labels = next_batch()
            return model(input_ids=tokens, attention_mask=attention, labels=labels).loss

        return model, optimizer, loss_of, None


@dataclass(frozen=True)
class LlamaConfig(_ZooModel):
    """HuggingFace ``LlamaForCausalLM`` from a ``LlamaConfig`` (random weights,
    SDPA attention): RMSNorm, rotary positions, grouped-query attention
    (``kv_heads``), SiLU-gated MLP; next-token loss (``labels=input_ids``),
    gradient-norm clipping at 1.0, AdamW."""

    name: str = "zoo_llama"
    batch: int = 4
    seq_len: int = 64
    vocab: int = 2000
    hidden: int = 128
    ffn: int = 344
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    lr: float = 3e-4
    kind: ClassVar[str] = "language"
    _TINY: ClassVar[dict] = dict(batch=2, seq_len=8, vocab=40, hidden=16, ffn=32, layers=1,
                                 heads=2, kv_heads=1)
    #: TinyLlama-1.1B shapes at 1024 tokens
    _FULL: ClassVar[dict] = dict(batch=4, seq_len=1024, vocab=32000, hidden=2048, ffn=5632,
                                 layers=22, heads=32, kv_heads=4)

    def _parts(self, device: str) -> tuple:
        import torch

        tf = _transformers()
        config = tf.LlamaConfig(vocab_size=self.vocab, hidden_size=self.hidden,
                                intermediate_size=self.ffn, num_hidden_layers=self.layers,
                                num_attention_heads=self.heads,
                                num_key_value_heads=self.kv_heads,
                                max_position_embeddings=self.seq_len, bos_token_id=0,
                                eos_token_id=1, pad_token_id=None, attn_implementation="sdpa")
        model = tf.LlamaForCausalLM(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr)
        next_batch = _batches(lambda: torch.randint(
            0, self.vocab, (self.batch, self.seq_len), device=device))

        def loss_of() -> torch.Tensor:
            tokens = next_batch()
            return model(input_ids=tokens, labels=tokens).loss

        return model, optimizer, loss_of, 1.0


# -- recommender -----------------------------------------------------------------------

@dataclass(frozen=True)
class DeepFMConfig(_ZooModel):
    """DeepFM on click logs: ``fields`` categorical features of ``rows``
    values each, looked up in one shared ``nn.Embedding`` (field offsets
    added to the ids) of width ``embed`` and in a width-1 one for the linear
    term; the factorisation-machine pairwise term 0.5·((Σe)² − Σe²); an MLP
    on the concatenated embeddings; binary cross-entropy with logits, Adam."""

    name: str = "zoo_deepfm"
    batch: int = 256
    fields: int = 26
    rows: int = 1000
    embed: int = 16
    mlp: tuple[int, ...] = (256, 128)
    dropout: float = 0.2
    lr: float = 1e-3
    kind: ClassVar[str] = "recommender"
    _TINY: ClassVar[dict] = dict(batch=4, fields=3, rows=10, embed=4, mlp=(8,))
    #: Criteo-shaped: 26 fields of 100k ids, 400-400-400 MLP
    _FULL: ClassVar[dict] = dict(batch=4096, rows=100_000, embed=16, mlp=(400, 400, 400))

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F
        from torch import nn

        class DeepFM(nn.Module):
            def __init__(self, cfg: DeepFMConfig) -> None:
                super().__init__()
                self.register_buffer("offsets", torch.arange(cfg.fields) * cfg.rows,
                                     persistent=False)
                self.embed = nn.Embedding(cfg.fields * cfg.rows, cfg.embed)
                self.linear = nn.Embedding(cfg.fields * cfg.rows, 1)
                self.bias = nn.Parameter(torch.zeros(1))
                layers: list = []
                width = cfg.fields * cfg.embed
                for w in cfg.mlp:
                    layers += [nn.Linear(width, w), nn.BatchNorm1d(w), nn.ReLU(),
                               nn.Dropout(cfg.dropout)]
                    width = w
                self.mlp = nn.Sequential(*layers, nn.Linear(width, 1))

            def forward(self, ids):
                ids = ids + self.offsets
                e = self.embed(ids)  # (B, F, D)
                first = self.linear(ids).sum(dim=(1, 2)) + self.bias
                second = 0.5 * (e.sum(1).pow(2) - e.pow(2).sum(1)).sum(1)
                return first + second + self.mlp(e.flatten(1)).squeeze(1)

        model = DeepFM(self).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr)
        next_batch = _batches(lambda: (
            torch.randint(0, self.rows, (self.batch, self.fields), device=device),
            torch.randint(0, 2, (self.batch,), device=device).float()))

        def loss_of() -> torch.Tensor:
            ids, clicks = next_batch()
            return F.binary_cross_entropy_with_logits(model(ids), clicks)

        return model, optimizer, loss_of, None


@dataclass(frozen=True)
class TwoTowerConfig(_ZooModel):
    """A two-tower retrieval model: a user tower (user-id embedding and the
    mean of the embeddings of ``history`` watched items, then an MLP) and an
    item tower (item-id and category embeddings, then an MLP), both
    L2-normalised; in-batch softmax over the user-item dot products at
    temperature 0.05 (cross-entropy against the diagonal), Adam."""

    name: str = "zoo_two_tower"
    batch: int = 256
    users: int = 10_000
    items: int = 20_000
    categories: int = 100
    history: int = 20
    embed: int = 64
    tower: tuple[int, ...] = (128, 64)
    lr: float = 1e-3
    kind: ClassVar[str] = "recommender"
    _TINY: ClassVar[dict] = dict(batch=4, users=10, items=20, categories=3, history=3, embed=4,
                                 tower=(8,))
    _FULL: ClassVar[dict] = dict(batch=8192, users=1_000_000, items=2_000_000, categories=1000,
                                 history=50, embed=128, tower=(512, 256, 128))

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F
        from torch import nn

        def mlp(width: int) -> nn.Sequential:
            layers: list = []
            for i, w in enumerate(self.tower):
                layers.append(nn.Linear(width, w))
                if i < len(self.tower) - 1:
                    layers.append(nn.ReLU())
                width = w
            return nn.Sequential(*layers)

        class TwoTower(nn.Module):
            def __init__(self, cfg: TwoTowerConfig) -> None:
                super().__init__()
                self.user = nn.Embedding(cfg.users, cfg.embed)
                self.item = nn.Embedding(cfg.items, cfg.embed)
                self.category = nn.Embedding(cfg.categories, cfg.embed)
                self.user_tower, self.item_tower = mlp(2 * cfg.embed), mlp(2 * cfg.embed)

            def forward(self, user, history, item, category):
                u = torch.cat([self.user(user), self.item(history).mean(1)], dim=1)
                v = torch.cat([self.item(item), self.category(category)], dim=1)
                u = F.normalize(self.user_tower(u), dim=-1)
                v = F.normalize(self.item_tower(v), dim=-1)
                return u @ v.t() / 0.05

        model = TwoTower(self).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr)
        labels = torch.arange(self.batch, device=device)
        next_batch = _batches(lambda: (
            torch.randint(0, self.users, (self.batch,), device=device),
            torch.randint(0, self.items, (self.batch, self.history), device=device),
            torch.randint(0, self.items, (self.batch,), device=device),
            torch.randint(0, self.categories, (self.batch,), device=device)))

        def loss_of() -> torch.Tensor:
            return F.cross_entropy(model(*next_batch()), labels)

        return model, optimizer, loss_of, None


# -- routing ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MoEConfig(_ZooModel):
    """A mixture-of-experts token classifier: an input projection, then
    ``layers`` pre-LayerNorm residual blocks whose MLP is ``experts`` experts
    (Linear-GELU-Linear) behind a softmax router with top-``top_k`` gating
    (``topk``, ``torch.where`` over the choices, index the routed tokens,
    ``index_add_`` back, weighted by the renormalised gate), a head; token
    cross-entropy plus the Switch load-balancing loss (0.01·E·Σ f·p, the
    dispatch fractions from a ``scatter_`` one-hot), AdamW. ``batch`` is
    tokens."""

    name: str = "zoo_moe"
    batch: int = 256
    features: int = 64
    d_model: int = 128
    ffn: int = 256
    experts: int = 8
    top_k: int = 2
    layers: int = 2
    num_classes: int = 16
    lr: float = 1e-3
    kind: ClassVar[str] = "routing"
    _TINY: ClassVar[dict] = dict(batch=8, features=4, d_model=8, ffn=16, experts=3, layers=1,
                                 num_classes=3)
    _FULL: ClassVar[dict] = dict(batch=16384, features=1024, d_model=1024, ffn=4096,
                                 experts=8, layers=4, num_classes=1000)

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F

        model = _moe_class()(self).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr)
        next_batch = _batches(lambda: (
            torch.randn(self.batch, self.features, device=device),
            torch.randint(0, self.num_classes, (self.batch,), device=device)))

        def loss_of() -> torch.Tensor:
            x, labels = next_batch()
            logits, aux = model(x)
            return F.cross_entropy(logits, labels) + 0.01 * aux

        return model, optimizer, loss_of, None


@functools.cache
def _moe_class() -> type:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class MoELayer(nn.Module):
        def __init__(self, cfg: MoEConfig) -> None:
            super().__init__()
            self.top_k = cfg.top_k
            self.norm = nn.LayerNorm(cfg.d_model)
            self.router = nn.Linear(cfg.d_model, cfg.experts, bias=False)
            self.experts = nn.ModuleList([
                nn.Sequential(nn.Linear(cfg.d_model, cfg.ffn), nn.GELU(),
                              nn.Linear(cfg.ffn, cfg.d_model))
                for _ in range(cfg.experts)])

        def forward(self, x):
            h = self.norm(x)
            probs = F.softmax(self.router(h), dim=-1)  # (T, E)
            gate, chosen = torch.topk(probs, self.top_k, dim=-1)  # (T, k)
            gate = gate / gate.sum(dim=-1, keepdim=True)
            out = torch.zeros_like(h)
            for e, expert in enumerate(self.experts):
                token, slot = torch.where(chosen == e)
                y = expert(h[token]) * gate[token, slot].unsqueeze(1)
                out.index_add_(0, token, y)
            n_experts = probs.shape[1]
            dispatch = torch.zeros_like(probs).scatter_(1, chosen, 1.0)
            aux = n_experts * (dispatch.mean(0) / self.top_k * probs.mean(0)).sum()
            return x + out, aux

    class MoE(nn.Module):
        def __init__(self, cfg: MoEConfig) -> None:
            super().__init__()
            self.inp = nn.Linear(cfg.features, cfg.d_model)
            self.blocks = nn.ModuleList([MoELayer(cfg) for _ in range(cfg.layers)])
            self.norm = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.num_classes)

        def forward(self, x):
            x = self.inp(x)
            aux = x.new_zeros(())
            for block in self.blocks:
                x, a = block(x)
                aux = aux + a
            return self.head(self.norm(x)), aux

    return MoE


# -- graph -----------------------------------------------------------------------------

@dataclass(frozen=True)
class GraphSAGEConfig(_ZooModel):
    """Full-graph GraphSAGE node classification on a random graph of
    ``batch`` nodes and ``edges`` directed edges: each layer gathers the
    source features of every edge (``index_select``), sums them into the
    destination nodes (``index_add_``), divides by the in-degree, and
    applies Linear(self) + Linear(neighbours), then ReLU and dropout;
    cross-entropy on the training nodes (a boolean mask, half the nodes),
    Adam with weight decay. ``batch`` is nodes."""

    name: str = "zoo_graphsage"
    batch: int = 2000
    edges: int = 16_000
    features: int = 64
    hidden: int = 128
    layers: int = 2
    num_classes: int = 8
    dropout: float = 0.5
    lr: float = 1e-2
    kind: ClassVar[str] = "graph"
    _TINY: ClassVar[dict] = dict(batch=10, edges=30, features=4, hidden=8, num_classes=3)
    #: ogbn-products-shaped (2.4M nodes, 62M edges) at a tenth of the edges
    _FULL: ClassVar[dict] = dict(batch=2_400_000, edges=6_000_000, features=100, hidden=256,
                                 layers=3, num_classes=47)

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F
        from torch import nn

        class SAGELayer(nn.Module):
            def __init__(self, c_in: int, c_out: int) -> None:
                super().__init__()
                self.self_lin = nn.Linear(c_in, c_out)
                self.neigh_lin = nn.Linear(c_in, c_out, bias=False)

            def forward(self, x, src, dst, inv_degree):
                agg = torch.zeros_like(x).index_add_(0, dst, x.index_select(0, src))
                return self.self_lin(x) + self.neigh_lin(agg * inv_degree)

        class GraphSAGE(nn.Module):
            def __init__(self, cfg: GraphSAGEConfig) -> None:
                super().__init__()
                widths = [cfg.features] + [cfg.hidden] * (cfg.layers - 1) + [cfg.num_classes]
                self.convs = nn.ModuleList([SAGELayer(a, b)
                                            for a, b in zip(widths[:-1], widths[1:])])
                self.drop = nn.Dropout(cfg.dropout)

            def forward(self, x, src, dst, inv_degree):
                for i, conv in enumerate(self.convs):
                    x = conv(x, src, dst, inv_degree)
                    if i < len(self.convs) - 1:
                        x = self.drop(F.relu(x))
                return x

        model = GraphSAGE(self).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr, weight_decay=5e-4)
        n = self.batch

        def make() -> tuple:
            src = torch.randint(0, n, (self.edges,), device=device)
            dst = torch.randint(0, n, (self.edges,), device=device)
            degree = torch.zeros(n, device=device).index_add_(
                0, dst, torch.ones(self.edges, device=device))
            train = torch.rand(n, device=device) < 0.5
            return (torch.randn(n, self.features, device=device), src, dst,
                    (1.0 / degree.clamp(min=1)).unsqueeze(1), train,
                    torch.randint(0, self.num_classes, (n,), device=device))

        next_batch = _batches(make)

        def loss_of() -> torch.Tensor:
            x, src, dst, inv_degree, train, labels = next_batch()
            logits = model(x, src, dst, inv_degree)
            return F.cross_entropy(logits[train], labels[train])

        return model, optimizer, loss_of, None


# -- audio -----------------------------------------------------------------------------

@dataclass(frozen=True)
class AudioConv1dConfig(_ZooModel):
    """An M5-style keyword spotter on raw waveforms: a wide strided
    ``Conv1d`` (kernel 80, stride 16) then three 3-tap ones, each with
    ``BatchNorm1d``, ReLU and a 4x ``MaxPool1d``, global average pooling
    (``F.avg_pool1d``), a Linear head; ``log_softmax`` + NLL loss, Adam with
    weight decay."""

    name: str = "zoo_audio_m5"
    batch: int = 16
    samples: int = 16000
    channels: int = 32
    num_classes: int = 35
    lr: float = 1e-2
    kind: ClassVar[str] = "audio"
    _TINY: ClassVar[dict] = dict(batch=2, samples=8000, channels=4, num_classes=3)
    #: Speech Commands at 16 kHz, 128 channels
    _FULL: ClassVar[dict] = dict(batch=256, samples=16000, channels=128)

    def _parts(self, device: str) -> tuple:
        import torch
        import torch.nn.functional as F
        from torch import nn

        c = self.channels

        def stage(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list:
            return [nn.Conv1d(c_in, c_out, kernel, stride), nn.BatchNorm1d(c_out), nn.ReLU(),
                    nn.MaxPool1d(4)]

        class M5(nn.Module):
            def __init__(self, n_classes: int) -> None:
                super().__init__()
                self.features = nn.Sequential(*stage(1, c, 80, 16), *stage(c, c, 3),
                                              *stage(c, 2 * c, 3), *stage(2 * c, 2 * c, 3))
                self.head = nn.Linear(2 * c, n_classes)

            def forward(self, wave):
                x = self.features(wave)
                x = F.avg_pool1d(x, x.shape[-1]).squeeze(-1)
                return F.log_softmax(self.head(x), dim=-1)

        model = M5(self.num_classes).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr, weight_decay=1e-4)
        next_batch = _batches(lambda: (
            torch.randn(self.batch, 1, self.samples, device=device),
            torch.randint(0, self.num_classes, (self.batch,), device=device)))

        def loss_of() -> torch.Tensor:
            wave, labels = next_batch()
            return F.nll_loss(model(wave), labels)

        return model, optimizer, loss_of, None


# -- the zoo and its split -----------------------------------------------------------------

#: Every zoo model at its registered ("quick") size.
ZOO_CONFIGS: tuple[Any, ...] = (
    LSTMLMConfig(),
    GRUClassifierConfig(),
    T5Config(),
    Seq2SeqTransformerConfig(),
    VGGConfig(),
    UNetConfig(),
    ViTConfig(),
    BertMLMConfig(),
    LlamaConfig(),
    DeepFMConfig(),
    TwoTowerConfig(),
    MoEConfig(),
    GraphSAGEConfig(),
    AudioConv1dConfig(),
)

#: The network kinds in the zoo, sorted.
ZOO_KINDS: tuple[str, ...] = tuple(sorted({cfg.kind for cfg in ZOO_CONFIGS}))


#: How many models each change that grew the zoo appended to :data:`ZOO_CONFIGS`,
#: in order. The split rule deals out each such batch on its own, so a model,
#: once in a half, stays there.
ZOO_ADDITIONS: tuple[int, ...] = (14,)


def split_by_rule(configs: tuple[Any, ...]) -> dict[str, str]:
    """The split rule on one batch of models: sort ``configs`` by ``(kind,
    name)`` and alternate, the first to ``"tuning"``. Returns {name: half}."""
    ordered = sorted(configs, key=lambda cfg: (cfg.kind, cfg.name))
    return {cfg.name: ZOO_HALVES[i % 2] for i, cfg in enumerate(ordered)}


def _split() -> dict[str, str]:
    if sum(ZOO_ADDITIONS) != len(ZOO_CONFIGS):
        raise ValueError(f"ZOO_ADDITIONS {ZOO_ADDITIONS} must add up to the "
                         f"{len(ZOO_CONFIGS)} models of ZOO_CONFIGS")
    split: dict[str, str] = {}
    start = 0
    for n in ZOO_ADDITIONS:
        split.update(split_by_rule(ZOO_CONFIGS[start:start + n]))
        start += n
    return split


#: {model name: its half}: :func:`split_by_rule` on each batch of :data:`ZOO_ADDITIONS`.
ZOO_SPLIT: dict[str, str] = _split()


def _base_name(name: str) -> str:
    for suffix in ("_tiny", "_full"):
        if name.endswith(suffix) and name[:-len(suffix)] in ZOO_SPLIT:
            return name[:-len(suffix)]
    return name


def zoo_half(name: str) -> str:
    """``"tuning"`` or ``"scoring"``: the half of zoo model ``name`` (its
    ``_tiny`` and ``_full`` variants share it); ValueError naming the model
    when it is not in the zoo."""
    half = ZOO_SPLIT.get(_base_name(name))
    if half is None:
        raise ValueError(f"{name!r} is not a zoo model; the zoo has {', '.join(ZOO_SPLIT)}")
    return half


def get_zoo_config(name: str) -> Any:
    """The registered config of zoo model ``name``; ValueError naming it otherwise."""
    for cfg in ZOO_CONFIGS:
        if cfg.name == name:
            return cfg
    raise ValueError(f"{name!r} is not a zoo model; the zoo has {', '.join(ZOO_SPLIT)}")
