"""Capture: each method, the trace-check fallback, remembered failures, fallback order."""
from __future__ import annotations

import pytest
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


class _SlicesByLength(torch.nn.Module):
    """Slices a buffer by the input's length, as transformers' position ids do: FX cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("positions", torch.arange(16, dtype=torch.float32))
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.positions[: x.shape[1]].unsqueeze(-1)


def test_fx_tracing_names_the_model_line_and_the_alternative() -> None:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx

    from edgeship.errors import LoweringError, failure_line
    from edgeship.lowering.capture import fx_tracing

    with pytest.raises(LoweringError) as caught:
        with fx_tracing("static int8 (prepare_fx)", "Use scheme dynamic."):
            prepare_fx(_SlicesByLength().eval(), get_default_qconfig_mapping("x86"), (torch.zeros(1, 8, 4),))
    text = failure_line(caught.value)
    assert text.startswith("static int8 (prepare_fx): torch.fx could not trace the model (TypeError at ")
    assert "test_capture.py:" in text and text.endswith("Use scheme dynamic.")  # the model's own line, whole


def test_fx_tracing_lets_other_errors_through() -> None:
    from edgeship.lowering.capture import fx_tracing

    with pytest.raises(ValueError, match="not from FX"):
        with fx_tracing("tool", "alternative"):
            raise ValueError("not from FX")


@pytest.mark.parametrize("folder", ["edgeship", "torch"])
def test_fx_tracing_names_the_model_line_in_a_folder_named_like_a_package(tmp_path, folder) -> None:
    """A clone named ``edgeship`` (what ``git clone`` names it) or a project under ``.../torch/``:
    the model's frames are judged by where the packages really are, not by a folder name."""
    import importlib.util
    import inspect

    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx

    from edgeship.errors import LoweringError, failure_line
    from edgeship.lowering.capture import fx_tracing

    source = tmp_path / folder / "models" / "slicer.py"
    source.parent.mkdir(parents=True)
    source.write_text("import torch\n\n\n" + inspect.getsource(_SlicesByLength))
    spec = importlib.util.spec_from_file_location("slicer_in_" + folder, source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(LoweringError) as caught:
        with fx_tracing("static int8 (prepare_fx)", "Use scheme dynamic."):
            prepare_fx(module._SlicesByLength().eval(), get_default_qconfig_mapping("x86"), (torch.zeros(1, 8, 4),))
    assert f"TypeError at {source}:" in failure_line(caught.value)
