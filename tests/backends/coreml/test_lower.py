"""coreml: packages are converted here, reloaded and their interface checked; prediction needs macOS."""
from __future__ import annotations

import sys

import pytest

from edgeship.backends.registry import BACKENDS
from edgeship.errors import LoweringError
from tests import system


@pytest.fixture
def coreml_lower(tiny_model, tmp_path):
    from edgeship.backends.base import LowerRequest
    from edgeship.lowering.capture import Capturer
    from edgeship.profile import Variant

    capturer = Capturer(tiny_model)

    def run(method: str, precision: str = "fp16", calibration=None, **options):
        backend = BACKENDS["coreml"]
        variant = Variant(name=f"cm-{precision}", backend="coreml", precision=precision, options=options)
        request = LowerRequest(capturer.get(method), variant, backend.parse_options(options),
                               tmp_path / variant.name / "model.mlpackage", calibration)
        return backend.lower(request)
    return run


@pytest.mark.parametrize("method", ["export", "trace"])
def test_coreml_fp16_package_reloads_with_the_spec_interface(coreml_lower, method: str) -> None:
    artifact = coreml_lower(method)
    assert artifact.path.is_dir() and (artifact.path / "Manifest.json").is_file()
    assert artifact.details["inputs"] == [{"name": "image", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert artifact.details["outputs"][0]["name"] == "output" and artifact.details["operators"]["conv"] == 3


def test_coreml_w8_quantizes_weights_to_int8(coreml_lower) -> None:
    artifact = coreml_lower("export", precision="w8")
    assert artifact.details["operators"].get("constexpr_affine_dequantize", 0) > 0


def test_coreml_w8a8_calibrates_and_adds_quantize_ops(coreml_lower, tiny_spec, tiny_project) -> None:
    from edgeship.calibration import load_dataset

    data = load_dataset(tiny_project / "calib.npz", tiny_spec, "calibration").take(8)
    artifact = coreml_lower("export", precision="int8", calibration=lambda: data, minimum_deployment_target="iOS17")
    assert artifact.details["operators"].get("quantize", 0) > 0
    assert any("calibrated on 8 samples" in n for n in artifact.notes)


def test_coreml_w8a8_needs_an_ios17_target(coreml_lower) -> None:
    with pytest.raises(LoweringError, match="needs minimum_deployment_target of iOS17"):
        coreml_lower("trace", precision="int8", calibration=lambda: None)


def test_coreml_unknown_deployment_target_lists_the_allowed_ones() -> None:
    problems = BACKENDS["coreml"].option_problems({"minimum_deployment_target": "iOS15"})
    assert problems and "iOS16" in problems[0] and "macOS15" in problems[0]


@pytest.mark.skipif(sys.platform == "darwin", reason=system.reason("os", "on macOS Core ML runs"))
def test_coreml_says_why_it_cannot_run_here() -> None:
    assert "needs macOS" in BACKENDS["coreml"].available()


def w8a8_program(module, x):
    """``module`` through the w8a8 path (calibrated on seeded samples, traced), converted: (module, ops)."""
    from types import SimpleNamespace

    import coremltools as ct
    import numpy as np
    import torch

    from edgeship.backends.coreml.lower import _program_ops, _recapture, activation_quantized
    from edgeship.calibration import Dataset

    data = Dataset({"x": np.random.default_rng(0).random((8, *x.shape[1:]), dtype=np.float32)}, None, "test")
    notes: list[str] = []
    quantized = activation_quantized(module, (x,), data, notes)
    traced = _recapture(quantized, SimpleNamespace(example_inputs=(x,)), notes)
    mlmodel = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=tuple(x.shape))], convert_to="mlprogram",
                         minimum_deployment_target=ct.target.iOS17)
    with torch.no_grad():
        assert torch.equal(torch.as_tensor(traced(x)[0]), torch.as_tensor(traced(x)[0]))  # nothing random in it
    return quantized, _program_ops(mlmodel.get_spec()), notes


def test_coreml_w8a8_quantizes_an_untraceable_model_by_parts() -> None:
    """A model torch.fx cannot trace whole (transformers' case) gets every Linear int8, each marked once."""
    import torch

    from tests.quantize.test_fx_parts import Untraceable

    torch.manual_seed(0)
    quantized, ops, notes = w8a8_program(Untraceable().eval(), torch.rand(1, 8))
    assert not [name for name, m in quantized.named_modules() if m.training]   # calibrated and traced in eval mode
    assert ops.get("constexpr_affine_dequantize") == 3 and ops.get("quantize", 0) >= 3
    assert any("quantized by parts: 3 traced part(s) holding 3 of 3" in n for n in notes)
    assert any("outputs flattened" in n for n in notes)   # the dict output, as the float trace has it


def test_coreml_w8a8_traces_the_model_as_it_is_evaluated() -> None:
    """coremltools' prepare() puts the model in train mode before FX traces it; a module that
    branches on self.training (StochasticDepth) must be traced in eval mode all the same."""
    import torch
    from torchvision.ops import StochasticDepth

    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.drop = torch.nn.Conv2d(4, 4, 3, padding=1), StochasticDepth(0.5, "row")

        def forward(self, x):
            return x + self.drop(self.conv(x))

    torch.manual_seed(0)
    model, x = Residual().eval(), torch.rand(1, 4, 8, 8)
    quantized, ops, _ = w8a8_program(model, x)
    traced = torch.jit.trace(quantized, (x,))
    assert not [n for n in traced.inlined_graph.nodes() if "bernoulli" in n.kind()]
    with torch.no_grad():
        from edgeship import metrics

        assert metrics.sqnr_db(model(x).numpy(), quantized(x).numpy()) > 20
    assert ops.get("constexpr_affine_dequantize") == 1


def test_coreml_w8a8_by_parts_is_not_confused_by_a_discarded_attempt() -> None:
    """The model's own graph (with its untraceable child as a call) has no layer of its own and is
    not kept; preparing it set qconfig = None on the child's layers, which the pooler's own prepare
    then refused ("Input float module must have a valid qconfig"), as in BERT."""
    import torch

    class Pooler(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dense, self.act = torch.nn.Linear(8, 8), torch.nn.Tanh()

        def forward(self, x):
            return self.act(self.dense(x))

    class Inner(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pooler = Pooler()

        def forward(self, x):
            return self.pooler(x) if x.shape[1] == 8 else x

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x * 2)

    torch.manual_seed(0)
    _, ops, notes = w8a8_program(Outer().eval(), torch.rand(1, 8))
    assert ops.get("constexpr_affine_dequantize") == 1
    assert any("1 traced part(s) holding 1 of 1" in n for n in notes)
