"""Capture: each method, the trace-check fallback, remembered failures, fallback order."""
from __future__ import annotations

import torch

from edgeship.lowering.capture import Capturer
from edgeship.model import load_model
from edgeship.spec import load_spec


def _model(entry: str, shape: str):
    return load_model(load_spec(entry, shape))


def test_capture_each_method_produces_its_program(tiny_model) -> None:
    capturer = Capturer(tiny_model)
    assert isinstance(capturer.get("export").program, torch.export.ExportedProgram)
    assert isinstance(capturer.get("trace").program, torch.jit.ScriptModule)
    assert isinstance(capturer.get("script").program, torch.jit.ScriptModule)


def test_capture_dynamic_batch_export_accepts_other_batch_sizes(tiny_model) -> None:
    program = Capturer(tiny_model).get("export", dynamic_batch=True).program
    out = program.module()(torch.rand(5, 3, 16, 16))
    assert out.shape == (5, 4)


def test_capture_trace_of_attention_falls_back_to_unchecked_trace_with_note() -> None:
    model = _model("tests.models.tinynet:build_attention", "1,4,16")
    captured = Capturer(model).get("trace")
    assert any("trace check failed" in n for n in captured.notes)
    x = torch.rand(1, 4, 16)
    torch.testing.assert_close(captured.program(x), model.module(x))


def test_capture_failures_are_remembered_and_fallback_reaches_next_method() -> None:
    capturer = Capturer(_model("tests.models.tinynet:build_uncapturable", "1,3"))
    captured, failures = capturer.first(["export", "trace", "script"])
    assert captured is None and [f.method for f in failures] == ["export", "trace", "script"]
    assert all(f.line for f in failures) and len(capturer.failures()) == 3


def test_capture_first_returns_the_first_working_method(tiny_model) -> None:
    captured, failures = Capturer(tiny_model).first(["script", "export"])
    assert captured.method == "script" and failures == []
