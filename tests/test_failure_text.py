"""One-line failure texts: no terminal colour codes, and the operator a converter could not take
named (it is often only in a chained error, as lowering.log shows it)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeship.backends.registry import SPECS
from edgeship.cli import main
from edgeship.errors import failure_line, first_line, plain, unsupported_op
from tests.conftest import write_profile

# Every backend's converter patterns (a lowering failure is read with its own backend's only).
EVERY_CONVERTER = tuple(p for spec in SPECS.values() for p in spec.unsupported_op_patterns)


def chained(cause: str, message: str) -> Exception:
    try:
        try:
            raise LookupError(cause)
        except LookupError as e:
            raise RuntimeError(message) from e
    except RuntimeError as e:
        return e


def test_first_line_drops_terminal_colour_codes() -> None:
    error = ValueError("Failed to convert. \x1b[96mThis is step 3/3\x1b[0m of exporting.\nmore")
    assert first_line(error) == "Failed to convert. This is step 3/3 of exporting."
    assert plain("\x1b[1;31mred\x1b[0m \x1b[2K") == "red "


@pytest.mark.parametrize("text, op", [
    ("No ONNX function found for <OpOverload(op='aten.linalg_inv_ex', overload='default')>.", "aten::linalg_inv_ex"),
    ("Exporting the operator 'aten::linalg_inv' to ONNX opset version 20 is not supported", "aten::linalg_inv"),
    ("Operator torch._ops.aten.linalg_inv_ex.default is not in Core ATen opset", "aten::linalg_inv_ex"),
    ("Missing out variants: {'aten::_foo_bar'}", "aten::_foo_bar"),
    ("For non-const input, the lowering for Torch `linalg_inv` op is not supported", "linalg_inv"),
    ("PyTorch convert function for op 'grid_sampler' not implemented.", "grid_sampler"),
    ("Unsupported op: aten::upsample_bicubic2d", "aten::upsample_bicubic2d"),
    ("the graph holds aten::size and aten::eye; shapes are static", None),
    ('  File "/v/coremltools/converters/mil/frontend/torch/ops.py", line 174, in convert_single_node\n'
     '    add_op(context, node)\n'
     '  File "/v/coremltools/converters/mil/frontend/torch/ops.py", line 3066, in _int\n'
     '    _cast(context, node, int, "int32")\n'
     '  File "/v/coremltools/converters/mil/frontend/torch/ops.py", line 3048, in _cast\n', "int"),
])
def test_unsupported_op_is_found_in_the_chained_errors(text: str, op: str | None) -> None:
    assert unsupported_op(chained(text, "Failed to convert the exported program"), EVERY_CONVERTER) == op


def test_failure_line_names_the_op_only_when_the_first_line_does_not() -> None:
    error = chained("No ONNX function found for <OpOverload(op='aten.linalg_inv_ex', overload='default')>",
                    "Failed to convert. \x1b[96mThis is step 3/3\x1b[0m")
    assert failure_line(error, patterns=EVERY_CONVERTER) == ("RuntimeError: Failed to convert. This is step 3/3 "
                                   "(unsupported op: aten::linalg_inv_ex)")
    named = RuntimeError("Exporting the operator 'aten::linalg_inv' to ONNX opset version 20 is not supported")
    assert failure_line(named, patterns=EVERY_CONVERTER) == f"RuntimeError: {named}"


def test_build_lowering_failure_message_is_plain_and_names_the_op(capsys, tmp_path: Path) -> None:
    variants = '\n[[variants]]\nname = "ort"\nbackend = "onnx"\ncapture = ["export"]\n'
    out = tmp_path / "out"
    code = main(["build", "--target", str(write_profile(tmp_path, variants)), "--model",
                 "tests.models.tinynet:build_inverse", "--input-shape", "1,4,4", "--out", str(out)])
    capsys.readouterr()
    error = next(v for v in json.loads((out / "results.json").read_text())["variants"] if v["name"] == "ort")["error"]
    assert code == 3 and "\x1b" not in error and error.endswith("(unsupported op: aten::linalg_inv_ex)")
    assert "linalg_inv_ex" in (out / "ort" / "lowering.log").read_text()


@pytest.mark.parametrize("pattern", EVERY_CONVERTER)
def test_each_backend_pattern_names_the_op(pattern: str) -> None:
    import re

    assert "op" in re.compile(pattern).groupindex


def test_a_converter_pattern_is_read_only_for_its_own_backend() -> None:
    error = chained("Missing out variants: {'aten::_foo_bar'}", "to_executorch failed")
    assert unsupported_op(error, SPECS["executorch"].unsupported_op_patterns) == "aten::_foo_bar"
    assert unsupported_op(error, SPECS["onnx"].unsupported_op_patterns) is None
