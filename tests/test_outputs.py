"""Output names and signatures: flattened like torch's pytree, compared like Optimum's validation."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from edgeship.devices.runner import decode_outputs, encode_outputs, merge_batches
from edgeship.outputs import flatten, graph_name, mismatches, names_of, signature_of


def test_flatten_names_a_lone_tensor_tuple_items_dict_keys_and_nested_items() -> None:
    assert names_of("t") == ["output"]
    assert names_of(("a", "b")) == ["output0", "output1"]
    assert names_of(OrderedDict(last_hidden_state=1, pooler_output=2)) == ["last_hidden_state", "pooler_output"]
    nested = {"out": {"boxes": 1, "scores": 2}, "aux": (3, [4, 5])}
    assert flatten(nested) == [("out.boxes", 1), ("out.scores", 2), ("aux.0", 3), ("aux.1.0", 4), ("aux.1.1", 5)]
    assert graph_name("out.boxes") == "out.boxes" and graph_name("a b/c") == "a_b_c"


def test_flatten_follows_torch_pytree_order() -> None:
    from torch.utils import _pytree

    value = {"z": (1, 2), "a": {"k": 3, "b": 4}}
    leaves, _ = _pytree.tree_flatten(value)
    assert [v for _, v in flatten(value)] == leaves


def sig(name, value, batch=1):
    return signature_of(name, value, batch)


def test_mismatches_name_both_sides_for_count_shape_and_dtype() -> None:
    expected = [sig("logits", np.zeros((4, 10), np.float32)), sig("labels", np.zeros((4, 3), np.int64))]
    assert mismatches(expected, [np.zeros((4, 10), np.float32), np.zeros((4, 3), np.int64)]) == []
    assert mismatches(expected, [np.zeros((4, 10), np.float32)]) == [
        "the artifact returns 1 output(s), the float model 2 (logits, labels)"]
    assert mismatches(expected, [np.zeros((4, 12), np.float32), np.zeros((4, 3), np.int32)]) == [
        "output logits: the artifact returns shape [N, 12], the float model [N, 10]",
        "output labels: the artifact returns int32, the float model int64"]


def test_mismatches_allow_float16_only_for_fp16_variants() -> None:
    expected = [sig("y", np.zeros((2, 3), np.float32))]
    half = [np.zeros((2, 3), np.float16)]
    assert mismatches(expected, half, "fp16") == []
    assert mismatches(expected, half, "fp32") == ["output y: the artifact returns float16, the float model float32"]


def test_mismatches_tell_ragged_from_fixed_outputs() -> None:
    ragged = [sig("boxes", [np.zeros((3, 4), np.float32), np.zeros((0, 4), np.float32)])]
    assert ragged[0].shape == [None, 4] and ragged[0].ragged
    assert mismatches(ragged, [[np.zeros((5, 4), np.float32), np.zeros((1, 4), np.float32)]]) == []
    (problem,) = mismatches(ragged, [np.zeros((2, 4), np.float32)])
    assert problem.startswith("output boxes: the artifact returns one length for every sample")


def test_runner_merges_fixed_outputs_and_keeps_varying_ones_per_sample() -> None:
    per_batch = [[np.ones((1, 2)), np.zeros((3, 4))], [2 * np.ones((1, 2)), np.zeros((0, 4))]]
    merged = merge_batches(per_batch, batch=1, n=2)
    np.testing.assert_array_equal(merged[0], [[1, 1], [2, 2]])
    assert [a.shape for a in merged[1]] == [(3, 4), (0, 4)]
    back = decode_outputs(encode_outputs(merged))
    np.testing.assert_array_equal(back[0], merged[0])
    assert [a.shape for a in back[1]] == [(3, 4), (0, 4)]
    assert decode_outputs(encode_outputs([[]])) == [[]]  # no samples still round-trips


def test_runner_refuses_varying_outputs_with_a_batch_above_one() -> None:
    with pytest.raises(RuntimeError, match=r"need a batch of 1"):
        merge_batches([[np.zeros((3, 4))], [np.zeros((5, 4))]], batch=2, n=4)
