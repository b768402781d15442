"""The networks whose gradient timelines Caramel's plan is built from, and a batch for each.

ResNet-50, VGG-16 and ViT-B/16 come from :mod:`repro.models`; the BERT-base encoder (12 layers,
hidden 768, 12 heads, FFN 3072, vocabulary 30522, 512 positions: Devlin et al. 2019, §3) is
``torch.nn.TransformerEncoder`` with those sizes under a token and position embedding and a
masked-LM head tied to nothing (so every weight is a gradient to reduce). Tiny variants of each
family serve the CPU smoke runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from repro.models import build_model, get_entry


class BertEncoder(nn.Module):
    """Token ids (batch, seq) -> per-token vocabulary logits (batch, seq, vocab)."""

    def __init__(self, vocab: int = 30522, positions: int = 512, width: int = 768, depth: int = 12,
                 heads: int = 12, ffn: int = 3072, dropout: float = 0.0):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab, width)
        self.pos_embed = nn.Embedding(positions, width)
        self.type_embed = nn.Embedding(2, width)
        self.embed_norm = nn.LayerNorm(width)
        layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.mlm_dense = nn.Linear(width, width)
        self.mlm_norm = nn.LayerNorm(width)
        self.mlm_out = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_embed(idx) + self.pos_embed(pos)[None] + self.type_embed(torch.zeros_like(idx))
        x = self.encoder(self.embed_norm(x))
        return self.mlm_out(self.mlm_norm(F.gelu(self.mlm_dense(x))))


@dataclass
class Workload:
    """One network and its batch: ``family`` is resnet50, vgg16, bert_base or vit_b16 (their paper
    sizes) or a registered :mod:`repro.models` name; ``kw`` overrides the builder's sizes (tiny runs)."""

    name: str = "resnet50"
    family: str = "resnet50"
    batch: int = 32
    image_size: int = 224  # images: height = width
    seq: int = 128  # bert: tokens per sequence
    kw: dict = field(default_factory=dict)

    def build(self) -> nn.Module:
        if self.family == "bert_base":
            return BertEncoder(**self.kw)
        return build_model(self._registered(), **self.kw)

    def _registered(self) -> str:
        return {"vgg16": "vgg16_imagenet"}.get(self.family, self.family)

    def batch_fn(self, model: nn.Module, device: torch.device, seed: int = 0):
        """(inputs, loss function of the output): random data of the run's shape (timing needs no real data)."""
        g = torch.Generator().manual_seed(seed)
        if self.family == "bert_base":
            vocab = model.tok_embed.num_embeddings
            x = torch.randint(0, vocab, (self.batch, self.seq), generator=g)
            y = torch.randint(0, vocab, (self.batch, self.seq), generator=g)
            x, y = x.to(device), y.to(device)
            return x, lambda out: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        size = self.kw.get("image_size", self.image_size)
        x = torch.randn(self.batch, 3, size, size, generator=g).to(device)
        classes = self.kw.get("num_classes") or get_entry(self._registered()).num_classes
        y = torch.randint(0, classes, (self.batch,), generator=g).to(device)
        return x, lambda out: F.cross_entropy(out, y)
