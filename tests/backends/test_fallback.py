"""The fallback ladder for vendor steps: documented alternatives tried in order, each step down
recorded, and a crash with no alternative left named by vendor, step and operator."""
from __future__ import annotations

import errno

import pytest
from onnx import helper

from edgeship.backends import fallback
from edgeship.backends.fallback import Rung, descend, vendor_step
from edgeship.errors import LoweringError


def _infer_Expand(node) -> None:  # noqa: N802 - named as ONNX Runtime's symbolic shape inference names it
    shape = None
    len(shape)  # what ORT 1.32 does with an input it left without a shape


def _symbolic_pass() -> None:
    _infer_Expand(helper.make_node("Expand", ["x", "shape"], ["y"], name="mask_expand"))


def test_descend_runs_the_next_rung_and_records_the_step_down_when_a_rung_crashes() -> None:
    ran = []
    rungs = [Rung("full", _symbolic_pass, failing="symbolic shape inference"),
             Rung("without symbolic shape inference", lambda: ran.append("second") or "model"),
             Rung("none", lambda: ran.append("third"))]
    done = descend("ONNX Runtime", "quant_pre_process", rungs)
    assert (done.value, done.rung, ran) == ("model", "without symbolic shape inference", ["second"])
    [step] = done.steps
    assert step.note() == ("quant_pre_process: symbolic shape inference failed (TypeError in _infer_Expand at "
                           "operator Expand (node 'mask_expand'): object of type 'NoneType' has no len()); "
                           "ran without it")
    record = step.record()
    assert (record["vendor"], record["from"], record["to"], record["operator"], record["node"]) == (
        "ONNX Runtime", "full", "without symbolic shape inference", "Expand", "mask_expand")


def test_descend_names_vendor_step_and_operator_when_the_last_rung_fails_too() -> None:
    rungs = [Rung("full", _symbolic_pass, failing="symbolic shape inference"),
             Rung("without symbolic shape inference", _symbolic_pass)]
    with pytest.raises(LoweringError) as caught:
        descend("ONNX Runtime", "quant_pre_process", rungs)
    message = str(caught.value)
    assert message.startswith("ONNX Runtime quant_pre_process (without symbolic shape inference) crashed at "
                              "operator Expand (node 'mask_expand'): TypeError in _infer_Expand: object of type")
    assert "; tried before it: quant_pre_process: symbolic shape inference failed (TypeError" in message
    assert isinstance(caught.value.__cause__, TypeError)  # lowering.log keeps the library's traceback


def test_vendor_step_names_the_node_a_vendor_was_processing_when_it_has_no_alternative() -> None:
    def quantize_static() -> None:
        for node in [helper.make_node("Relu", ["a"], ["b"], name="relu_1"),
                     helper.make_node("MatMul", ["b", "w"], ["c"], name="head")]:
            if node.op_type == "MatMul":
                raise KeyError("w")

    expected = (r"^ONNX Runtime quantize_static crashed at operator MatMul \(node 'head'\): "
                r"KeyError in quantize_static: 'w'; no documented alternative")
    with pytest.raises(LoweringError, match=expected):
        vendor_step("ONNX Runtime", "quantize_static", quantize_static)


def test_descend_raises_the_machines_errors_as_they_are_without_stepping_down() -> None:
    def full_disk() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    second = []
    with pytest.raises(OSError):
        descend("ONNX Runtime", "quant_pre_process", [Rung("full", full_disk), Rung("none", lambda: second.append(1))])
    assert second == []


def test_recorded_writes_the_fallbacks_key_only_when_a_step_was_taken() -> None:
    details: dict = {}
    fallback.recorded(details, [])
    assert details == {}
    done = descend("onnxslim", "slim", [Rung("full", _symbolic_pass), Rung("without simplification", lambda: None)])
    fallback.recorded(details, done.steps)
    assert [r["note"] for r in details["fallbacks"]] == [done.steps[0].note()]
    assert fallback.lifted(details) == {"fallbacks": [done.steps[0].record()]} and details == {}


def test_told_names_the_earlier_steps_down_in_a_later_failure() -> None:
    """A step down recorded only on success would be lost when a later step (quantize_static) fails."""
    done = descend("ONNX Runtime", "quant_pre_process", [
        Rung("full", _symbolic_pass, failing="symbolic shape inference"),
        Rung("without symbolic shape inference", lambda: "model")])
    with pytest.raises(LoweringError, match=r"quantize_static crashed.*\(after earlier steps down: quant_pre_process: "
                                            r"symbolic shape inference failed .*; ran without it\)"):
        with fallback.told(done.steps):
            vendor_step("ONNX Runtime", "quantize_static", lambda: {}["w"])
    with pytest.raises(LoweringError) as plain, fallback.told([]):
        vendor_step("ONNX Runtime", "quantize_static", lambda: {}["w"])
    assert "after earlier" not in str(plain.value)
