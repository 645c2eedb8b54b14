"""GPT-2 from HuggingFace ``transformers``, randomly initialised from a small
``GPT2Config`` (never downloaded), trained on random tokens with its own
language-model loss (``labels=input_ids``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from perfmodel.workloads.base import DATA_BATCHES, TrainingStep, cycle_batches, training_step


@dataclass(frozen=True)
class HFGPT2Config:
    """``GPT2LMHeadModel`` with ``n_layer`` blocks of width ``n_embd`` on ``batch``
    random sequences of ``seq_len`` tokens (``n_positions = seq_len``), SDPA attention."""

    name: str = "hf_gpt2"
    batch: int = 8
    seq_len: int = 128
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    vocab: int = 1000
    lr: float = 1e-4
    kind: ClassVar[str] = "hf"

    def tiny(self) -> HFGPT2Config:
        """Batch 2 of 8 tokens, one layer of width 16, vocabulary 50."""
        return dataclasses.replace(self, name=f"{self.name}_tiny", batch=2, seq_len=8,
                                   n_layer=1, n_embd=16, n_head=2, vocab=50)

    def full_size(self) -> HFGPT2Config:
        """GPT-2 small: 12 layers of 768, 12 heads, 1024 tokens, vocabulary 50257."""
        return dataclasses.replace(self, name=f"{self.name}_full", batch=8, seq_len=1024,
                                   n_layer=12, n_embd=768, n_head=12, vocab=50257)

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The model on ``device`` with :data:`DATA_BATCHES` synthetic batches."""
        import torch

        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except ImportError as exc:
            raise ImportError("transformers is not installed; pip install transformers") from exc
        torch.manual_seed(seed)
        config = GPT2Config(vocab_size=self.vocab, n_positions=self.seq_len, n_embd=self.n_embd,
                            n_layer=self.n_layer, n_head=self.n_head,
                            bos_token_id=self.vocab - 1, eos_token_id=self.vocab - 1,
                            attn_implementation="sdpa")
        model = GPT2LMHeadModel(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr, foreach=True)
        next_batch = cycle_batches([
            torch.randint(0, self.vocab, (self.batch, self.seq_len), device=device)
            for _ in range(DATA_BATCHES)])

        def loss_of() -> torch.Tensor:
            tokens = next_batch()
            return model(input_ids=tokens, labels=tokens).loss

        return training_step(self.name, model, optimizer, loss_of, self.batch)
