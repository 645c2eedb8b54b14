"""Pre-LayerNorm Transformers on random tokens: a BERT-like encoder trained on
masked-token prediction and a GPT-like decoder trained on next-token prediction.

Token embedding plus learned position embedding, then ``layers`` blocks of
[LayerNorm, QKV Linear, ``scaled_dot_product_attention`` (causal in the
decoder), out Linear, dropout, residual; LayerNorm, Linear-GELU-Linear,
dropout, residual], a final LayerNorm and a vocabulary head tied to the token
embedding. The encoder replaces ``mask_fraction`` of the positions (picked up
front) with a mask token and scores only those; the decoder scores every
position.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from perfmodel.workloads.base import DATA_BATCHES, TrainingStep, cycle_batches, training_step

if TYPE_CHECKING:
    import torch

ARCHITECTURES = ("encoder", "decoder")
#: Full-size variants: BERT-base and GPT-2 small.
_FULL_SIZE = {
    "encoder": dict(batch=32, seq_len=512, d_model=768, heads=12, layers=12, ffn=3072,
                    vocab=30522),
    "decoder": dict(batch=8, seq_len=1024, d_model=768, heads=12, layers=12, ffn=3072,
                    vocab=50257),
}


@dataclass(frozen=True)
class TransformerConfig:
    """A Transformer ``architecture`` (``"encoder"`` or ``"decoder"``) on
    ``batch`` random sequences of ``seq_len`` tokens."""

    name: str = "transformer"
    batch: int = 4
    seq_len: int = 128
    d_model: int = 256
    heads: int = 4
    layers: int = 2
    ffn: int = 1024
    vocab: int = 8192
    dropout: float = 0.1
    architecture: str = "encoder"
    mask_fraction: float = 0.15
    lr: float = 1e-4
    kind: ClassVar[str] = "transformer"

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {ARCHITECTURES}, "
                             f"got {self.architecture!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not a multiple of heads={self.heads}")

    def tiny(self) -> TransformerConfig:
        """Batch 2 of 8 tokens, one layer of width 16, vocabulary 50."""
        return dataclasses.replace(self, name=f"{self.name}_tiny", batch=2, seq_len=8,
                                   d_model=16, heads=2, layers=1, ffn=32, vocab=50)

    def full_size(self) -> TransformerConfig:
        """BERT-base (encoder) or GPT-2 small (decoder) sizes."""
        return dataclasses.replace(self, name=f"{self.name}_full",
                                   **_FULL_SIZE[self.architecture])

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The Transformer on ``device`` with :data:`DATA_BATCHES` synthetic batches."""
        import torch
        import torch.nn.functional as F

        torch.manual_seed(seed)
        model = _transformer_class()(self).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr, foreach=True)
        next_batch = cycle_batches([self._batch(device) for _ in range(DATA_BATCHES)])

        def loss_of() -> torch.Tensor:
            tokens, positions, targets = next_batch()
            logits = model(tokens, positions)
            return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))

        return training_step(self.name, model, optimizer, loss_of, self.batch)

    def _batch(self, device: str) -> tuple:
        """Input tokens (B, S), the flat scored positions (None: all) and their targets."""
        import torch

        b, s = self.batch, self.seq_len
        if self.architecture == "decoder":
            tokens = torch.randint(0, self.vocab, (b, s + 1), device=device)
            return tokens[:, :-1].contiguous(), None, tokens[:, 1:].contiguous()
        tokens = torch.randint(0, self.vocab - 1, (b, s))
        n_masked = max(1, round(self.mask_fraction * b * s))
        positions = torch.randperm(b * s)[:n_masked].sort().values
        targets = tokens.view(-1)[positions]
        tokens.view(-1)[positions] = self.vocab - 1  # the mask token
        return tokens.to(device), positions.to(device), targets.to(device)


@functools.cache
def _transformer_class() -> type:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        """Pre-LN attention and MLP sublayers, each with dropout and a residual."""

        def __init__(self, cfg: TransformerConfig) -> None:
            super().__init__()
            d = cfg.d_model
            self.heads, self.causal = cfg.heads, cfg.architecture == "decoder"
            self.ln1, self.qkv, self.out = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.drop1, self.drop2 = nn.Dropout(cfg.dropout), nn.Dropout(cfg.dropout)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, cfg.ffn), nn.GELU(), nn.Linear(cfg.ffn, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = (self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads)
                       .permute(2, 0, 3, 1, 4).unbind(0))
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            x = x + self.drop1(self.out(attn.transpose(1, 2).reshape(b, s, d)))
            return x + self.drop2(self.mlp(self.ln2(x)))

    class Transformer(nn.Module):
        """``forward(tokens, positions)`` returns the vocabulary logits of the
        flat ``positions`` (P, V), or of every position (B, S, V) if None."""

        def __init__(self, cfg: TransformerConfig) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
            self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
            self.blocks = nn.Sequential(*(Block(cfg) for _ in range(cfg.layers)))
            self.ln_f = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
            self.head.weight = self.tok.weight
            self.register_buffer("seq_positions", torch.arange(cfg.seq_len), persistent=False)
            with torch.no_grad():  # BERT's and GPT-2's initialisation of the embeddings
                self.tok.weight.normal_(std=0.02)
                self.pos.weight.normal_(std=0.02)

        def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
            x = self.tok(tokens) + self.pos(self.seq_positions[:tokens.shape[1]])
            h = self.ln_f(self.blocks(x))
            if positions is not None:
                h = h.reshape(-1, h.shape[-1]).index_select(0, positions)
            return self.head(h)

    return Transformer
