"""PyTorch Mobile static int8 of models torch.fx cannot trace whole (quantized by parts): which
operators are quantized, and keep_float (a number, or "auto" by an accuracy budget) chosen by the
per-layer sensitivity measured inside the parts."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from edgeship import metrics
from edgeship.calibration import Dataset
from tests.quantize import culprit
from tests.quantize.conftest import keeps_the_culprit, lowerer, sqnr_vs_eager


class Embed(nn.Module):
    """Checks its input's width in Python: torch.fx cannot trace this module's own code."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != 4:
            raise ValueError("Embed takes 4 features")
        return self.proj(x)


class Mixer(nn.Module):
    """Single-head self-attention (named so that only its softmax, not its class, says attention)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.out(torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ v)


class TinyTransformer(nn.Module):
    """Linear in, a layer norm, attention with a residual add, Linear out: 4 Linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.norm, self.mixer, self.head = Embed(), nn.LayerNorm(16), Mixer(), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        return self.head(x + self.mixer(self.norm(x)))


class CulpritByParts(culprit.Culprit):
    """tests/quantize/culprit.py's model (``depth`` identity layers after the culprit), whose forward
    checks its input's channels in Python."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*[nn.Conv2d(8, 8, 1) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] != 3:
            raise ValueError("3 channels")
        return self.body(self.first(x))


def tiny_transformer() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer().eval()


def culprit_by_parts(depth: int = 3) -> CulpritByParts:
    """Weighted as culprit.build() weights its model: each identity layer takes 1/depth of the mean off."""
    torch.manual_seed(0)
    model = CulpritByParts(depth).eval()
    with torch.no_grad():
        model.first.weight[:, 0] = 0
        mean = model.first(torch.from_numpy(culprit.samples().inputs["input"])).mean((0, 2, 3))
        for conv in model.body:
            conv.weight.copy_(torch.eye(8).view(8, 8, 1, 1))
            conv.bias.copy_(-mean / depth)
    return model


def deep_culprit_by_parts() -> CulpritByParts:
    return culprit_by_parts(depth=7)


def load(entry: str, shape: str):
    from edgeship.model import load_model
    from edgeship.spec import load_spec

    return load_model(load_spec(f"tests.backends.pytorch_mobile.test_quantize_parts:{entry}", shape))


@dataclass
class MinSqnr:
    """An accuracy budget (what ``keep_float = "auto"`` judges by): SQNR over every output."""

    db: float

    def failures(self, samples: Dataset, reference: list[np.ndarray], outputs: list[np.ndarray]) -> list[str]:
        value = metrics.sqnr_db(np.concatenate([np.ravel(r) for r in reference]),
                                np.concatenate([np.ravel(o) for o in outputs]))
        return [] if value >= self.db else [f"SQNR {value:.1f} dB below {self.db:g}"]

    def described(self) -> str:
        return f"min SQNR {self.db:g} dB"


@pytest.mark.parametrize(("operators", "quantized"), [
    ("auto", {"quantized::linear"}),
    ("all", {"quantized::linear", "quantized::layer_norm", "quantized::add"}),
])
def test_mobile_parts_operators_auto_quantizes_only_the_linear_layers_of_a_transformer(
        tmp_path, operators, quantized) -> None:
    model = load("tiny_transformer", "1,6,4")
    data = Dataset({"x": np.random.default_rng(0).standard_normal((32, 6, 4)).astype(np.float32)}, None, "test")
    artifact, predict = lowerer(model, data, tmp_path)("pytorch-mobile", "trace", {"operators": operators},
                                                       engine="qnnpack")
    q = artifact.details["quantization"]
    assert q["fx_parts"]["layers_quantized"] == 4 and q["operators"] == ("weighted" if operators == "auto" else "all")
    assert {op.split(".")[0] for op in artifact.details["operators"] if op.startswith("quantized::")} == quantized
    assert any(note.startswith("int8 operators: weighted layers only: the graph has attention (aten::softmax) and "
                               "layer normalization") for note in artifact.notes) == (operators == "auto")
    assert sqnr_vs_eager(model, predict, data) > 15


def test_mobile_parts_keep_float_keeps_the_layer_whose_own_error_costs_most(tmp_path) -> None:
    model = load("culprit_by_parts", "1,3,16,16")
    kept, all_int8, one_float = keeps_the_culprit(lowerer(model, culprit.samples(), tmp_path), model,
                                                  "pytorch-mobile", "trace", engine="qnnpack")
    q = kept.details["quantization"]
    assert q["fx_parts"]["parts"] == ["first", "body"] and q["kept_float"] == ["first"]
    report = (kept.path.parent / "sensitivity.json").read_text()
    assert '"sqnr_db": null' not in report   # the accumulated measure, from hooks inside the parts
    assert one_float > all_int8 + 8, (all_int8, one_float)


def test_mobile_parts_keep_float_auto_keeps_the_fewest_layers_the_budget_needs(tmp_path) -> None:
    model = load("deep_culprit_by_parts", "1,3,16,16")   # 8 layers: "auto" may keep 2
    lower = lowerer(model, culprit.samples(), tmp_path)
    auto = {"method": "minmax", "keep_float": "auto", "samples": 32}  # judged on all 32, not the 16 ranked on
    none, all_int8 = lower("pytorch-mobile", "trace", auto, name="lenient", budget=MinSqnr(5.0), engine="qnnpack")
    one, one_float = lower("pytorch-mobile", "trace", auto, name="strict", budget=MinSqnr(22.0), engine="qnnpack")
    assert none.details["quantization"]["kept_float"] == []
    assert one.details["quantization"]["kept_float"] == ["first"]
    auto = one.details["quantization"]["sensitivity"]["auto"]
    assert auto["kept"] == 1 and auto["failures_on_calibration"] == [] and auto["cap"] == 2
    assert [(t["kept"], t["run"], bool(t["failures"])) for t in auto["tried"]] == [
        (0, "real", True), (1, "emulated", False), (1, "real", False)]   # emulated inside the parts, then real
    assert any(note.startswith("keep_float auto: 1 layer(s) kept in float, the fewest") for note in one.notes)
    held_out = culprit.samples(8, seed=1)
    assert sqnr_vs_eager(model, one_float, held_out, n=8) > sqnr_vs_eager(model, all_int8, held_out, n=8) + 8


def test_mobile_parts_emulation_inside_the_parts_agrees_with_the_int8_kernels() -> None:
    """``without([])`` (every layer's observers quantizing, run inside each part) against the real
    converted model: far closer to it than either is to float, so the "auto" search and the own
    measure see what the engine does; with nothing quantized it is the float model."""
    from edgeship.backends.pytorch_mobile.quantize import (
        _calibrate_and_convert,
        one_layer_runs,
        qconfig_mapping,
        quantized_engine,
    )
    from edgeship.quantize.observers import run_batches

    model = tiny_transformer()
    data = Dataset({"x": np.random.default_rng(0).standard_normal((16, 6, 4)).astype(np.float32)}, None, "test")
    weighted = [(name, type(m)) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    with quantized_engine("qnnpack"):
        mapping = qconfig_mapping("qnnpack", "minmax", True, [], weighted)
        quantized, _, found, prepared = _calibrate_and_convert(
            model, (torch.from_numpy(data.inputs["x"][:1]),), mapping, data, (16, True), None, {}, True)
        runs = one_layer_runs(prepared, data, 16)
        real = run_batches(quantized, data, 16)
    float_out = run_batches(model, data, 16)
    assert not found.whole and np.allclose(float_out[0][0], runs.reference[0][0], atol=1e-6)
    int8_vs_float = metrics.sqnr_db(float_out[0][0], real[0][0])
    emulated = metrics.sqnr_db(real[0][0], runs.without([])[0][0])
    assert emulated > int8_vs_float + 15, (int8_vs_float, emulated)
