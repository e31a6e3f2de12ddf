"""FX quantization by parts: a model torch.fx cannot trace whole still has its layers quantized."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from edgeship import metrics
from edgeship.errors import LoweringError
from edgeship.quantize.fx_parts import convert_parts, prepare_parts


class Gate(nn.Module):
    """Its own code branches on a tensor's value: FX cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > -1e9:
            return self.fc(x)
        return x


class Block(nn.Module):
    """Traceable around its untraceable child."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.out = Gate(), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.out(torch.relu(self.gate(x))) * scale


class Untraceable(nn.Module):
    """Branches on a shape (as Hugging Face models do) around a block and a head; returns a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.block, self.head = Block(), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if x.shape[1] == 8:
            x = self.block(x, scale=0.5)
        return {"logits": self.head(x), "features": x}


class Traceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.head = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc(x)))


def fx_static(module: nn.Module, x: torch.Tensor):
    """prepare_fx by parts (qnnpack), calibrated on seeded samples, converted: (parts, quantized)."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.fx.custom_config import PrepareCustomConfig
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    def prepare(part, inputs, non_traceable, scope):
        config = PrepareCustomConfig().set_non_traceable_module_names(non_traceable)
        return prepare_fx(part, get_default_qconfig_mapping("qnnpack"), inputs, prepare_custom_config=config)

    torch.backends.quantized.engine = "qnnpack"
    found = prepare_parts(copy.deepcopy(module).eval(), (x,), prepare)
    with torch.no_grad():
        for sample in torch.rand(16, 1, 8, generator=torch.Generator().manual_seed(1)):
            found.module(sample)
    return found, convert_parts(found, convert_fx)


def test_fx_parts_traceable_model_is_prepared_whole() -> None:
    found, quantized = fx_static(Traceable().eval(), torch.rand(1, 8))
    assert found.whole and found.note() == "" and found.layers == (2, 2)
    assert isinstance(quantized, torch.fx.GraphModule)


def test_fx_parts_quantizes_every_layer_of_an_untraceable_model() -> None:
    torch.manual_seed(0)
    model, x = Untraceable().eval(), torch.rand(1, 8)
    found, quantized = fx_static(model, x)
    assert found.parts == ["block", "block.gate.fc", "head"]
    assert set(found.untraceable) == {"", "block.gate"}
    assert "if x.shape[1] == 8" not in found.untraceable[""] and "test_fx_parts.py:" in found.untraceable[""]
    assert found.leaves["block"] == ["block.gate"] and found.layers == (3, 3)
    assert "quantized by parts: 3 traced part(s) holding 3 of 3 Conv/Linear layers" in found.note()
    traced = torch.jit.trace(quantized, (x,), strict=False)
    kinds = [n.kind() for n in traced.inlined_graph.nodes()]
    assert kinds.count("quantized::linear") == 3 and "aten::linear" not in kinds
    with torch.no_grad():
        ref, out = model(x), quantized(x)
    assert set(out) == {"logits", "features"}   # the model's own output structure, rebuilt from the graphs
    assert metrics.sqnr_db(ref["logits"].numpy(), out["logits"].numpy()) > 25


def test_fx_parts_refuse_a_call_other_than_the_traced_one() -> None:
    found, quantized = fx_static(Untraceable().eval(), torch.rand(1, 8))
    with torch.no_grad():
        quantized.block(torch.rand(1, 8), scale=0.5)   # as traced
        with pytest.raises(LoweringError, match="block was traced by torch.fx for the arguments"):
            quantized.block(torch.rand(1, 8), scale=2.0)


def test_fx_parts_raise_the_tracing_error_when_no_layer_can_be_traced() -> None:
    class NoLayers(nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[1] == 8 else x

    from edgeship.lowering.capture import fx_failure

    with pytest.raises(Exception) as caught:
        fx_static(NoLayers().eval(), torch.rand(1, 8))
    assert fx_failure(caught.value) is not None   # the FX error itself, which fx_tracing turns into a message


def test_fx_parts_mobile_static_int8_of_an_untraceable_model(tmp_path) -> None:
    """The PyTorch Mobile quantizer quantizes by parts and says so; keep_float works there too."""
    from types import SimpleNamespace

    import numpy as np

    from edgeship.backends.pytorch_mobile.quantize import capture_like, quantize_module, quantized_engine
    from edgeship.calibration import Dataset
    from edgeship.quantize.settings import QuantizationSettings

    torch.manual_seed(0)
    model, x = Untraceable().eval(), torch.rand(1, 8)
    data = Dataset({"x": np.random.default_rng(0).random((16, 1, 8), dtype=np.float32)[:, 0]}, None, "test")
    captured = SimpleNamespace(method="script", example_inputs=(x,),
                               model=SimpleNamespace(module=model, state_sha256="0" * 64))

    def request(**settings):
        variant = SimpleNamespace(quantization=QuantizationSettings(scheme="static", samples=16, **settings))
        return SimpleNamespace(captured=captured, variant=variant, calibration=lambda: data, cache=None,
                               dest=tmp_path / "model.ptl", budget=None)

    with quantized_engine("qnnpack"):
        module, quantized = quantize_module(request(), "qnnpack")
        traced = capture_like(captured, module)   # scripted float model, traced quantized one
        _, one_float = quantize_module(request(keep_float=1), "qnnpack")
    assert one_float.details["kept_float"] == [one_float.details["sensitivity"]["worst"][0]["layer"]]
    assert quantized.details["fx_parts"]["layers_quantized"] == 3
    assert any("quantized by parts" in note for note in quantized.notes)
    assert sum(n.kind() == "quantized::linear" for n in traced.inlined_graph.nodes()) == 3
