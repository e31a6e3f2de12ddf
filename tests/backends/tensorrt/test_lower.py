"""tensorrt: the ONNX models, builder settings and scripts written here; the engine builds where
TensorRT imports (marked), and the host proxy stands in for it elsewhere, labelled as such."""
from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgeship.backends.registry import BACKENDS
from edgeship.backends.tensorrt import engine as tensorrt_engine
from tests import system
from tests.conftest import TESTS
from tests.lowering.conftest import sqnr_against_eager

FIXTURES = TESTS / "fixtures" / "tensorrt"
SETTINGS = {"onnx": "model.onnx", "engine": "model.engine", "precision": "int8", "tensorrt_version": "10.3",
            "workspace_mb": 2048, "timing_cache": "timing.cache", "builder_optimization_level": 4,
            "dla_core": None, "gpu_fallback": True}


def test_tensorrt_fp16_writes_static_onnx_and_the_device_side_files(lower, tiny_model) -> None:
    artifact, predict = lower("tensorrt", "export", precision="fp16")
    folder = artifact.path.parent
    assert artifact.details["inputs"][0]["shape"] == [1, 3, 16, 16] and artifact.details["opset"] == 18
    assert {p.name for p in folder.iterdir()} >= {"model.onnx", "engine.json", "tensorrt_engine.py", "build_engine.sh"}
    assert json.loads((folder / "engine.json").read_text())["precision"] == "fp16"
    assert "--fp16" in artifact.details["trtexec"] and "--int8" not in artifact.details["trtexec"]
    assert any("onnxslim" in n for n in artifact.notes)
    assert sqnr_against_eager(tiny_model, predict) >= 60  # the float ONNX behind the fp16 engine


def test_tensorrt_opset_17_for_older_tensorrt_comes_from_a_trace_capture(lower) -> None:
    artifact, _ = lower("tensorrt", "trace", precision="fp16", tensorrt_version="8.5", opset=17)
    assert onnx.load(str(artifact.path)).opset_import[0].version == 17


def test_tensorrt_int8_is_symmetric_qdq_with_per_channel_weights(tiny_model, tiny_spec, tiny_project, tmp_path) -> None:
    from edgeship.backends.base import LowerRequest
    from edgeship.calibration import load_dataset
    from edgeship.lowering.capture import Capturer
    from edgeship.profile import Variant

    backend = BACKENDS["tensorrt"]
    data = load_dataset(tiny_project / "calib.npz", tiny_spec, "calibration")
    variant = Variant(name="trt-int8", backend="tensorrt", precision="int8")
    request = LowerRequest(Capturer(tiny_model).get("export"), variant, backend.parse_options({}),
                           tmp_path / "trt-int8" / "model.onnx", lambda: data)
    artifact = backend.lower(request)
    model = onnx.load(str(artifact.path))
    zero_points = [i for i in model.graph.initializer if i.name.endswith("zero_point") and "bias" not in i.name]
    assert zero_points and all(onnx.numpy_helper.to_array(z).dtype == np.int8 for z in zero_points)
    assert all(not onnx.numpy_helper.to_array(z).any() for z in zero_points)  # symmetric: zero points 0
    assert any(onnx.numpy_helper.to_array(i).ndim == 1 and i.name.endswith("scale") and
               onnx.numpy_helper.to_array(i).size > 1 for i in model.graph.initializer)  # per-channel scales
    assert not [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT32]  # float biases
    assert "--int8" in artifact.details["trtexec"]
    proxy = backend.job_options(request.options, "int8")["proxy"]
    assert proxy["options"]["graph_optimization"] == "disabled" and proxy["label"] == "onnxruntime (host proxy)"


def test_tensorrt_opset_above_what_the_version_parses_is_a_profile_error() -> None:
    problems = BACKENDS["tensorrt"].option_problems({"tensorrt_version": "8.6", "opset": 18})
    assert problems and "TensorRT 8.6 parses opsets 9-17" in problems[0]


def test_tensorrt_unknown_version_lists_the_allowed_ones() -> None:
    problems = BACKENDS["tensorrt"].option_problems({"tensorrt_version": "9.9"})
    assert problems and "10.3" in problems[0] and "8.5" in problems[0]


def test_tensorrt_trtexec_command_maps_every_setting() -> None:
    cmd = tensorrt_engine.trtexec_command(dict(SETTINGS, dla_core=0))
    assert cmd[:3] == ["trtexec", "--onnx=model.onnx", "--saveEngine=model.engine"]
    assert {"--fp16", "--int8", "--memPoolSize=workspace:2048M", "--timingCacheFile=timing.cache",
            "--builderOptimizationLevel=4", "--useDLACore=0", "--allowGPUFallback"} <= set(cmd)
    old = tensorrt_engine.trtexec_command(dict(SETTINGS, tensorrt_version="8.5", builder_optimization_level=None))
    assert "--memPoolSize=workspace:2048" in old and not any("Level" in c for c in old)


def test_tensorrt_build_script_runs_trtexec_from_jetpack_or_path(tmp_path: Path) -> None:
    script = tensorrt_engine.build_script(dict(SETTINGS, precision="fp16"))
    assert script.startswith("#!/usr/bin/env sh") and "/usr/src/tensorrt/bin/trtexec" in script
    fake = tmp_path / "trtexec"
    fake.write_text('#!/bin/sh\necho "$@" > args.txt\n')
    fake.chmod(0o755)
    (tmp_path / "build_engine.sh").write_text(script)
    import subprocess
    subprocess.run(["sh", str(tmp_path / "build_engine.sh")], env={"TRTEXEC": str(fake), "PATH": "/usr/bin:/bin"},
                   check=True)
    assert (tmp_path / "args.txt").read_text().split()[:2] == ["--onnx=model.onnx", "--saveEngine=model.engine"]


class RecordingConfig:
    """Records what the builder mapping sets; stands in for trt.IBuilderConfig, which needs a GPU."""

    def __init__(self) -> None:
        self.flags: set[str] = set()
        self.pools: dict[str, int] = {}

    def set_flag(self, flag: str) -> None:
        self.flags.add(flag)

    def set_memory_pool_limit(self, pool: str, size: int) -> None:
        self.pools[pool] = size


FAKE_TRT = types.SimpleNamespace(
    BuilderFlag=types.SimpleNamespace(FP16="FP16", INT8="INT8", GPU_FALLBACK="GPU_FALLBACK"),
    MemoryPoolType=types.SimpleNamespace(WORKSPACE="WORKSPACE"), DeviceType=types.SimpleNamespace(DLA="DLA"),
    NetworkDefinitionCreationFlag=types.SimpleNamespace(EXPLICIT_BATCH=0), __version__="8.6.2")


@pytest.mark.parametrize("precision, flags", [("fp32", set()), ("fp16", {"FP16"}), ("int8", {"FP16", "INT8"})])
def test_tensorrt_builder_config_mapping(precision: str, flags: set[str]) -> None:
    config = RecordingConfig()
    tensorrt_engine.configure(None, config, dict(SETTINGS, precision=precision, dla_core=1), FAKE_TRT)
    assert config.flags == flags | {"GPU_FALLBACK"} and config.pools == {"WORKSPACE": 2048 << 20}
    assert config.builder_optimization_level == 4 and config.DLA_core == 1 and config.default_device_type == "DLA"


def test_tensorrt_network_flags_explicit_batch_only_before_10() -> None:
    assert tensorrt_engine.network_flags(FAKE_TRT) == 1
    assert tensorrt_engine.network_flags(types.SimpleNamespace(__version__="10.3.0")) == 0


@pytest.mark.parametrize("name, p50, p99", [("trtexec_summary_tensorrt_issue_4177.txt", 7.16092, 12.9675),
                                            ("trtexec_summary_yolo_on_jetson_issue_4.txt", 6.02185, 6.17407)])
def test_tensorrt_parses_recorded_trtexec_summaries(name: str, p50: float, p99: float) -> None:
    stats = tensorrt_engine.parse_trtexec_summary((FIXTURES / name).read_text())
    assert stats["latency"]["p50_ms"] == p50 and stats["latency"]["p99_ms"] == p99
    assert stats["gpu_compute_time"]["mean_ms"] > 0 and stats["throughput_qps"] > 100


@pytest.mark.tensorrt
def test_tensorrt_engine_builds_where_tensorrt_imports(lower) -> None:
    pytest.importorskip("tensorrt", reason=system.reason("gpu", "needs the TensorRT Python package and an NVIDIA GPU"))
    artifact, _ = lower("tensorrt", "export", precision="fp16")
    settings = json.loads((artifact.path.parent / "engine.json").read_text())
    engine = tensorrt_engine.build_engine(settings, str(artifact.path.parent))
    assert Path(engine).stat().st_size > 0 and (artifact.path.parent / "timing.cache").exists()


def test_tensorrt_notes_how_the_device_builds_a_graph_with_nms(tmp_path) -> None:
    """Detection deployed with its own NMS (ONNX NonMaxSuppression): the device-side options named."""
    import torch
    from torchvision.ops import nms

    from edgeship.backends.base import LowerRequest
    from edgeship.lowering.capture import Capturer
    from edgeship.model import LoadedModel
    from edgeship.profile import Variant
    from edgeship.spec import ModelSpec

    class Detect(torch.nn.Module):
        def forward(self, x):
            boxes = torch.cat([x[0, :, :2], x[0, :, :2] + 0.1 + x[0, :, 2:]], dim=1)
            return boxes[nms(boxes, x[0, :, 0], 0.5)]

    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 8, 4]}])
    x = torch.rand(1, 8, 4, generator=torch.Generator().manual_seed(0))
    backend = BACKENDS["tensorrt"]
    variant = Variant(name="trt", backend="tensorrt", precision="fp16")
    artifact = backend.lower(LowerRequest(Capturer(LoadedModel(spec, Detect().eval(), (x,), 0)).get("export"),
                                          variant, backend.parse_options({}), tmp_path / "trt" / "model.onnx"))
    assert artifact.details["operators"].get("NonMaxSuppression") == 1
    assert any("INMSLayer" in n and "EfficientNMS_TRT" in n and "postprocess" in n for n in artifact.notes)
