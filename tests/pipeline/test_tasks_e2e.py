"""Whole builds of models with several outputs and of each task: every output is compared by name,
the task's metrics are in results.json, and the task's gates decide.

Each test builds a tiny model through ONNX Runtime (fp32, and int8 where the point is a figure
below float parity): a few seconds each.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeship.cli import main
from tests.conftest import write_profile

MODELS = '''\
import torch
from torch import nn


class TwoHeads(nn.Module):
    """A classifier that also returns its features: a dict of two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        features = torch.relu(self.body(x)).mean((2, 3))
        return {"features": features, "logits": self.head(features)}


class Segmenter(nn.Module):
    """Per-pixel logits [N, 3, H, W]."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 1))

    def forward(self, x):
        return self.body(x)


class Embedder(nn.Module):
    """Token-like embeddings [N, 4, 16] from an image (the Linear is what int8 dynamic quantizes)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Conv2d(3, 16, 4, stride=4)
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        return self.proj(self.body(x).flatten(2).transpose(1, 2)[:, :4])


def two_heads():
    return TwoHeads()


def segmenter():
    return Segmenter()


def embedder():
    return Embedder()
'''
ONNX = """
[[variants]]
name = "ort"
backend = "onnx"
"""
ONNX_INT8 = ONNX + """
[[variants]]
name = "ort-int8"
backend = "onnx"
precision = "int8"
quantization = { scheme = "dynamic" }
gates = { GATES }
"""


def int8(gates: str = "min_sqnr_db = 60.0") -> str:
    """The fp32 and int8 ONNX variants, the int8 one with these gates (``key = value, ...``)."""
    return ONNX_INT8.replace("GATES", gates)


def project(tmp_path: Path, entry: str, extra: str = "", gates: str = "") -> tuple[Path, Path]:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "models.py").write_text(MODELS)
    spec = folder / "model.toml"
    spec.write_text(textwrap.dedent(f"""\
        name = "m"
        entry = "models:{entry}"
        inputs = [{{ name = "image", shape = [1, 3, 16, 16] }}]
        """) + textwrap.dedent(extra))
    return spec, folder


def build(capsys, tmp_path: Path, spec: Path, variants: str) -> tuple[int, dict, str]:
    profile = write_profile(tmp_path, variants)
    out = tmp_path / "out"
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(out), "--quiet"])
    text = "".join(capsys.readouterr())
    return code, json.loads((out / "results.json").read_text()), text


def rows(results: dict) -> dict[str, dict]:
    return {v["name"]: v for v in results["variants"]}


def test_build_compares_and_gates_every_output_by_name(capsys, tmp_path) -> None:
    spec, _ = project(tmp_path, "two_heads")
    code, results, text = build(capsys, tmp_path, spec, int8("min_sqnr_db = 100.0"))
    assert [o["name"] for o in results["model"]["outputs"]] == ["features", "logits"]
    assert results["model"]["outputs"][0]["shape"] == [1, 8]
    ort = rows(results)["ort"]
    assert ort["gates"]["passed"], ort["gates"]
    assert [o["name"] for o in ort["accuracy"]["outputs"]] == ["features", "logits"]
    assert all(o["sqnr_db"] is None or o["sqnr_db"] > 60 for o in ort["accuracy"]["outputs"])
    assert [o["name"] for o in ort["lowering"]["details"]["outputs"]] == ["features", "logits"]
    # int8 dynamic quantizes only the Linear: the first output stays exact, the second is gated too
    quantized = rows(results)["ort-int8"]
    assert quantized["accuracy"]["output"] == "features" and quantized["accuracy"]["sqnr_db"] > 100
    assert code == 3 and [f for f in quantized["gates"]["failures"] if "logits" in f][0].startswith(
        "sqnr_db of output logits ")


def test_build_judges_segmentation_by_miou_and_not_by_sqnr(capsys, tmp_path) -> None:
    spec, _ = project(tmp_path, "segmenter", 'task = "segmentation"\n')
    code, results, text = build(capsys, tmp_path, spec, int8("min_sqnr_db = 60.0, min_miou_vs_float = 0.5"))
    assert code == 0, text  # int8 SQNR is far below the 60 dB gate, which segmentation does not check
    assert results["model"]["task"] == "segmentation"
    for name in ("ort", "ort-int8"):
        task = rows(results)[name]["accuracy"]["task"]
        assert task["task"] == "segmentation" and 0.0 < task["values"]["miou_vs_float"] <= 1.0
        assert 0.0 < task["values"]["pixel_agreement"] <= 1.0
    assert rows(results)["ort"]["accuracy"]["task"]["values"]["miou_vs_float"] == 1.0


def test_build_fails_a_task_gate_whose_metric_is_low_and_notes_gates_the_task_ignores(capsys, tmp_path) -> None:
    spec, _ = project(tmp_path, "embedder", 'task = "embedding"\n')
    code, results, text = build(capsys, tmp_path, spec, int8("min_cosine_worst = 0.999999999").replace(ONNX, ""))
    quantized = rows(results)["ort-int8"]
    values = quantized["accuracy"]["task"]["values"]
    assert values["cosine_worst"] <= values["cosine_mean"] < 1.0
    assert code == 3 and any(f.startswith("cosine_worst ") for f in quantized["gates"]["failures"])
    assert any("gates not checked for task embedding: min_sqnr_db" in n for n in quantized["notes"])


@pytest.mark.parametrize("section, message", [
    ('task = "detection"\n[detection]\npostprocess = "host"\n',
     'postprocess = "host" needs [detection.decode]'),
    ('[segmentation]\noutput = "x"\n', "[segmentation] is given but task is 'classification'"),
])
def test_spec_task_sections_are_checked(capsys, tmp_path, section, message) -> None:
    spec, _ = project(tmp_path, "segmenter", section)
    profile = write_profile(tmp_path, ONNX)
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(tmp_path / "o")])
    assert code == 2 and message in capsys.readouterr().err


def test_spec_naming_an_output_the_model_lacks_is_refused(capsys, tmp_path) -> None:
    spec, _ = project(tmp_path, "two_heads", 'task = "embedding"\n[embedding]\noutput = "pooled"\n')
    profile = write_profile(tmp_path, ONNX)
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "names output 'pooled', but the model's outputs are: features, logits" in err


def test_labels_that_do_not_fit_the_task_are_refused(capsys, tmp_path) -> None:
    spec, folder = project(tmp_path, "segmenter", 'task = "segmentation"\n[data]\nevaluation = "eval.npz"\n')
    rng = np.random.default_rng(0)
    np.savez(folder / "eval.npz", x=rng.random((4, 3, 16, 16), dtype=np.float32), y=np.arange(4))
    profile = write_profile(tmp_path, ONNX)
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "segmentation labels (y) must be class masks [4, 16, 16]" in err


DYNAMIC = '''\
import torch
from torch import nn


class Encoder(nn.Module):
    """Token ids and a mask of any length: per-token features and their mean."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.lin = nn.Linear(16, 16)

    def forward(self, ids, mask):
        h = self.lin(self.emb(ids)) * mask.unsqueeze(-1).float()
        return {"hidden": h, "pooled": h.mean(1)}


class FixedLength(Encoder):
    """The same, but reshaped with the length seen when traced: a graph that only takes that length."""

    def forward(self, ids, mask):
        h = self.lin(self.emb(ids)) * mask.unsqueeze(-1).float()
        return {"hidden": h.reshape(1, int(ids.shape[1]), 16), "pooled": h.mean(1)}


def encoder():
    return Encoder()


def fixed_length():
    return FixedLength()
'''
DYNAMIC_SPEC = '''\
name = "enc"
entry = "enc:{entry}"
task = "embedding"
inputs = [
  {{ name = "ids", shape = [1, 16], dtype = "int64", range = [0, 100], dynamic = {{ 1 = {{ min = 4, max = 64 }} }} }},
  {{ name = "mask", shape = [1, 16], dtype = "int64", range = [1, 2], dynamic = {{ 1 = {{ min = 4, max = 64 }} }} }},
]
[embedding]
output = "pooled"
'''


def dynamic_project(tmp_path: Path, entry: str) -> Path:
    folder = tmp_path / "enc"
    folder.mkdir()
    (folder / "enc.py").write_text(DYNAMIC)
    (folder / "enc.toml").write_text(DYNAMIC_SPEC.format(entry=entry))
    return folder / "enc.toml"


def test_dynamic_model_is_validated_at_min_opt_and_max(capsys, tmp_path) -> None:
    code, results, text = build(capsys, tmp_path, dynamic_project(tmp_path, "encoder"), ONNX)
    assert code == 0, text
    ort = rows(results)["ort"]
    assert [lat["size"] for lat in ort["latency"]] == [None, "min", "max"]
    assert ort["latency"][0]["p50_ms"] > 0 and ort["latency"][1]["p50_ms"] is None  # timed at opt only
    for lat in ort["latency"]:
        assert lat["accuracy"]["task"]["values"]["cosine_worst"] > 0.9999
    assert rows(results)["eager"]["latency"][0]["size"] is None and len(rows(results)["eager"]["latency"]) == 1


def test_an_artifact_that_cannot_take_the_range_fails_at_that_size(capsys, tmp_path) -> None:
    trace_only = ONNX + 'capture = ["trace"]\noptions = { opset = 17 }\n'
    code, results, text = build(capsys, tmp_path, dynamic_project(tmp_path, "fixed_length"), trace_only)
    ort = rows(results)["ort"]
    assert code == 3, text
    assert "the artifact does not run at the min size" in ort["error"] and not ort["gates"]["passed"]
