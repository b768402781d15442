"""Transformers as ordinary ``nn.Module`` classes (each its own ``forward``, no Sequential spine):
a Vision Transformer (Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021; ViT-B/16:
patch 16, width 768, depth 12, 12 heads, MLP 3072, 86M parameters at 224x224) and a GPT-style
decoder stack (Radford et al. 2019, GPT-2 small: width 768, depth 12, 12 heads, context 1024,
vocabulary 50257, pre-norm blocks, causal attention; the output projection is not tied to the
token embedding, so that every parameter is used once).

Both are built for the SuperNeurons runtime's "any model" path (its units come from the traced
graph, see ``repro.papers.superneurons.units``), and are plain PyTorch models otherwise.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    """Multi-head self-attention through ``F.scaled_dot_product_attention``."""

    def __init__(self, width: int, heads: int, causal: bool = False, dropout: float = 0.0):
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, width: int, heads: int, mlp: int, causal: bool = False, dropout: float = 0.0):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads, causal, dropout)
        self.mlp = nn.Sequential(nn.Linear(width, mlp), nn.GELU(), nn.Linear(mlp, width), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class VisionTransformer(nn.Module):
    def __init__(self, num_classes: int = 1000, image_size: int = 224, patch: int = 16, width: int = 768,
                 depth: int = 12, heads: int = 12, mlp: int = 3072, dropout: float = 0.0, channels: int = 3):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image size {image_size} is not a multiple of the patch size {patch}")
        tokens = (image_size // patch) ** 2 + 1
        self.patch_embed = nn.Conv2d(channels, width, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(width, heads, mlp, dropout=dropout) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.drop(x + self.pos_embed)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class GPTDecoder(nn.Module):
    """Token ids (batch, time) -> next-token logits (batch, time, vocab)."""

    def __init__(self, vocab: int = 50257, context: int = 1024, width: int = 768, depth: int = 12,
                 heads: int = 12, mlp: int | None = None, dropout: float = 0.0):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab, width)
        self.pos_embed = nn.Parameter(torch.randn(1, context, width) * 0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(width, heads, mlp or 4 * width, causal=True, dropout=dropout)
                                     for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.tok_embed(idx) + self.pos_embed[:, :idx.shape[1]])
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


def vit(num_classes: int = 1000, **kw) -> VisionTransformer:
    """ViT-B/16 by default; any size by keyword (``width``, ``depth``, ``image_size``, ...)."""
    return VisionTransformer(num_classes, **kw)


def gpt_decoder(num_classes: int = 50257, **kw) -> GPTDecoder:
    """GPT-2-small-like by default; ``num_classes`` is the vocabulary."""
    return GPTDecoder(vocab=num_classes, **kw)
