"""A tiny sentence-embedding model wrapped the way a new user wraps one: a BERT fed its 2D 0/1
attention mask expanded to [batch, 1, tokens, tokens] inside the graph, and mean pooling over the
real tokens. The mask keeps a sentence of padding only from masking every score (``any`` over its
tokens), which ONNX opset 18 and later writes as a ReduceMax with its axes as an input: ONNX
Runtime 1.32's symbolic shape inference has no rule for that and leaves its output without a shape,
then crashes on the Expand that reads it (``TypeError: object of type 'NoneType' has no len()`` in
``_infer_Expand``), so ``quant_pre_process`` fails on this valid model. Without the symbolic pass
(ONNX's own shape inference only) it pre-processes and quantizes.

Random weights from a seeded config (2 layers, hidden 32: quick to export and quantize); token data
sources as a tokenizer pads sentences, so the mask matters.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

VOCAB = 100
TOKENS = 16
MASKED = -10000.0  # added to the attention scores of padding tokens


class MeanPooledBert(nn.Module):
    """``forward(input_ids, attention_mask)`` -> the mean of the token states where the mask is 1."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        batch, tokens = input_ids.shape
        valid = attention_mask.bool()
        # A sentence of padding only would mask every score of its rows (a boolean mask makes SDPA's softmax
        # NaN there): such a sentence attends to all its tokens instead, as wrappers guard against.
        empty = ~valid.any(dim=-1, keepdim=True)
        keys = valid | empty.expand(batch, tokens)
        expanded = keys[:, None, None, :].expand(batch, 1, tokens, tokens)
        additive = (~expanded).to(torch.float32) * MASKED
        states = self.bert(input_ids=input_ids, attention_mask=additive, return_dict=False)[0]
        weights = attention_mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def build(hidden: int = 32, layers: int = 2, heads: int = 2) -> nn.Module:
    """The embedder with seeded random weights (seed 0, whatever the caller seeded)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=TOKENS,
                        initializer_range=hidden ** -0.5, attn_implementation="eager")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MeanPooledBert(BertModel(config, add_pooling_layer=False)).eval()


def sentences(samples: int, seed: int) -> Iterator[dict[str, np.ndarray]]:
    """``samples`` padded sentences of batch 1: ids, then 0 ([PAD]) with mask 0 after 4 to TOKENS tokens."""
    rng = np.random.default_rng(seed)
    for _ in range(samples):
        words = int(rng.integers(4, TOKENS + 1))
        ids = np.zeros((1, TOKENS), dtype=np.int64)
        ids[0, :words] = rng.integers(1, VOCAB, size=words)
        mask = (ids != 0).astype(np.int64)
        yield {"input_ids": ids, "attention_mask": mask}


def calibration() -> Iterator[dict[str, np.ndarray]]:
    """16 calibration sentences."""
    return sentences(16, seed=1)


def evaluation() -> Iterator[dict[str, np.ndarray]]:
    """8 sentences apart from the calibration ones, each followed by its twin with one token changed
    (16: the fewest the embedding task's recall@1 takes). A random BERT's embeddings of unrelated
    sentences lie close together; a twin is each sentence's clear nearest neighbour, so recall@1
    against the float model judges the artifact, not a coin toss between near-ties."""
    rng = np.random.default_rng(3)
    for sample in sentences(8, seed=2):
        twin = {name: array.copy() for name, array in sample.items()}
        twin["input_ids"][0, rng.integers(0, int(sample["attention_mask"].sum()))] = rng.integers(1, VOCAB)
        yield sample
        yield twin


SPEC = f"""\
name = "embedder"
entry = "embedder:build"
task = "embedding"
inputs = [{{ name = "input_ids", shape = [1, {TOKENS}], dtype = "int64", range = [1, {VOCAB}] }},
          {{ name = "attention_mask", shape = [1, {TOKENS}], dtype = "int64", range = [1, 2] }}]
[data]
calibration = "embedder:calibration"
evaluation = "embedder:evaluation"
"""
