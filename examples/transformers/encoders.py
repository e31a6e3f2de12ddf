"""Small Hugging Face encoders (BERT, DistilBERT) with seeded random weights, and token data sources.

Nothing can be downloaded here, so each model is built from its config (``BertModel(config)``):
the architecture and code path of a real checkpoint, with random weights. The spec's seed seeds
torch before the entry runs, so every process builds the same weights.

Two choices shape what edgeship is shown:

- ``initializer_range`` is 1/sqrt(hidden) (0.088 at width 128), not the config's 0.02. At 0.02
  every attention head is uniform (entropy equal to log(tokens)) and both layers change the
  embeddings by ~9%: an artifact that broke attention or ignored the mask would still match the
  float model. At 1/sqrt(hidden) the layers change the embeddings by ~120% and masking half the
  tokens moves the other tokens' outputs by ~10%.
- ``attn_implementation="sdpa"`` (transformers' default; ``attention = "eager"`` in the spec's
  entry_kwargs for the matmul + softmax form). Both export everywhere edgeship lowers to, and
  ONNX, Core ML and the lite interpreter decompose the fused op into the same matmuls; the
  difference is ExecuTorch int8: XNNPACK's PT2E quantizer leaves the fused attention in float
  (SQNR 30.1 dB, worst per-sample cosine 0.9995 against the float model) but quantizes the
  outputs of eager's score matmul, scaling and mask add (18.2 dB, 0.983).

The wrappers hand the model a ready 4D additive mask ([batch, 1, 1, tokens]: 0 on real tokens,
-10000 on padding; transformers passes a 4D mask through as it is) instead of the 2D 0/1
attention_mask. The same numbers reach the softmax (the float outputs are identical), but the graph
loses transformers' mask construction (index, new_ones, arange + a Python-int offset), which two
lowerings refuse: Core ML ("Unsupported fx node new_ones") and PT2E int8 for ExecuTorch (torchao's
prepare_pt2e turns the int offset into a float constant, and the index then fails with "tensors used
as indices must be long, int, byte or bool tensors"). -10000 rather than the float32 minimum: in fp16
(Core ML) the minimum becomes -inf and 0 * -inf is NaN on every real token.

They return a tuple (last_hidden_state, pooler_output), not transformers' ``ModelOutput`` dict:
the plainest output structure, which every capture method and runtime takes alike (``torch.jit.trace``
refuses dict outputs unless ``strict=False``). Their outputs are therefore named ``output0`` and
``output1``.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

VOCAB = 1000
SEQUENCE = 128            # the spec's token count (inputs [1, 128])
SPECIAL = (0, 101, 102)   # [PAD], [CLS], [SEP] in the BERT vocabulary layout
MASKED = -10000.0         # added to the attention scores of padding tokens (fits fp16, unlike float32's minimum)


def additive_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[batch, tokens] 1/0 mask -> [batch, 1, 1, tokens] float: 0 where attended, MASKED on padding."""
    return (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * MASKED


class BertEncoder(nn.Module):
    """``BertModel`` called as ``forward(input_ids, attention_mask)`` -> (last_hidden_state, pooler_output)."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.bert(input_ids=input_ids, attention_mask=additive_mask(attention_mask), return_dict=False)
        return out[0], out[1]


class DistilBertEncoder(nn.Module):
    """``DistilBertModel`` called as ``forward(input_ids, attention_mask)`` -> last_hidden_state
    (DistilBERT has no pooler)."""

    def __init__(self, distilbert: nn.Module) -> None:
        super().__init__()
        self.distilbert = distilbert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = additive_mask(attention_mask)
        return self.distilbert(input_ids=input_ids, attention_mask=mask, return_dict=False)[0]


def bert(hidden: int = 128, layers: int = 2, heads: int = 2, vocab: int = VOCAB, max_positions: int = 512,
         attention: str = "sdpa") -> nn.Module:
    """A BERT encoder (BERT-tiny sized by default: 0.6 M parameters) with seeded random weights."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=max_positions,
                        initializer_range=hidden ** -0.5, attn_implementation=attention)
    return BertEncoder(BertModel(config, add_pooling_layer=True)).eval()


def distilbert(hidden: int = 128, layers: int = 2, heads: int = 2, vocab: int = VOCAB,
               max_positions: int = 512, attention: str = "sdpa") -> nn.Module:
    """A DistilBERT encoder (sinusoidal positions off, as in the released checkpoints) with seeded
    random weights."""
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(vocab_size=vocab, dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=4 * hidden,
                              max_position_embeddings=max_positions, initializer_range=hidden ** -0.5,
                              attn_implementation=attention)
    return DistilBertEncoder(DistilBertModel(config)).eval()


def token_batches(samples: int, seed: int, length: int = SEQUENCE, vocab: int = VOCAB) -> Iterator[dict]:
    """``samples`` seeded sentences of batch 1, as a tokenizer pads them: [CLS] w1 .. wn [SEP] then
    [PAD] up to ``length``, with attention_mask 1 on the n + 2 real tokens (n drawn from 6 to
    ``length`` - 2, so the mask matters in most samples)."""
    rng = np.random.default_rng(seed)
    for _ in range(samples):
        words = int(rng.integers(6, length - 1))
        ids = np.zeros((1, length), dtype=np.int64)
        ids[0, 1:words + 1] = rng.integers(len(SPECIAL), vocab, size=words)
        ids[0, 0], ids[0, words + 1] = SPECIAL[1], SPECIAL[2]
        mask = np.zeros((1, length), dtype=np.int64)
        mask[0, :words + 2] = 1
        yield {"input_ids": ids, "attention_mask": mask}


def evaluation() -> Iterator[dict]:
    """8 evaluation sentences: enough for the per-sample cosine, and short to run on every variant."""
    return token_batches(8, seed=1)


def calibration() -> Iterator[dict]:
    """32 calibration sentences (4096 token positions) for static int8, drawn apart from the evaluation ones."""
    return token_batches(32, seed=2)
