"""openvino (OpenVINO IR): conversion from the capture or ONNX, the precision the CPU plugin computes
in (pinned, recorded, checked), bf16's CPU check, f16 weights, int8 by NNCF with sensitivity and
keep_float, and the spec's dynamic dimensions."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.backends.base import LowerRequest
from edgeship.backends.openvino import device as openvino_device
from edgeship.backends.registry import BACKENDS, depends_on_cpu
from edgeship.calibration.dataset import Dataset
from edgeship.devices import runner
from edgeship.devices.cpu import cpu_facts
from edgeship.errors import LoweringError, ProfileError
from edgeship.lowering.capture import Capturer
from edgeship.profile import Variant
from edgeship.quantize.settings import QuantizationSettings
from tests import system
from tests.lowering.conftest import sqnr_against_eager
from tests.quantize.test_cpu_choice import EPYC, XEON

HAS_BF16 = any(f in cpu_facts()["flags"] for f in ("avx512_bf16", "amx_bf16"))


def _read(path: Path):
    import openvino as ov

    return ov.Core().read_model(str(path / "model.xml"))


def _lower(model, dest: Path, precision: str = "fp32", method: str = "export", cpus=None,
           quantization: QuantizationSettings | None = None, calibration: Dataset | None = None,
           load: bool = True, **options):
    backend = BACKENDS["openvino"]
    variant = Variant(name="v", backend="openvino", precision=precision, options=options, quantization=quantization)
    parsed = backend.parse_options(options)
    captured = Capturer(model).get(method, False)
    request = LowerRequest(captured, variant, parsed, dest, (lambda: calibration) if calibration else None,
                           None, cpus)
    artifact = backend.lower(request)
    return artifact, backend.load(artifact.path, parsed, threads=1) if load else None


def _calibration(model, n: int = 32) -> Dataset:
    shape = model.spec.inputs[0].shape[1:]
    return Dataset({model.spec.inputs[0].name: np.random.default_rng(3).random((n, *shape), dtype=np.float32)},
                   None, "test")


def test_openvino_fp32_is_an_ir_folder_with_the_specs_names_computed_in_f32(tiny_model, tmp_path) -> None:
    artifact, predict = _lower(tiny_model, tmp_path / "v" / "model.openvino")
    assert sorted(p.name for p in artifact.path.iterdir()) == ["model.bin", "model.xml"]
    model = _read(artifact.path)
    assert [p.get_any_name() for p in model.inputs] == [i.name for i in tiny_model.spec.inputs]
    assert artifact.details["converted_from"] == "export" and artifact.details["inference_precision"] == "f32"
    assert openvino_device._ov_rt_precision(model) == "f32"
    assert artifact.details["weight_constants"].get("f16", 0) == 0  # save_model's f16 default not taken
    assert sqnr_against_eager(tiny_model, predict) >= 60


def test_the_runner_pins_the_irs_precision_and_says_what_the_plugin_compiled(tiny_model, tmp_path) -> None:
    import openvino as ov

    artifact, _ = _lower(tiny_model, tmp_path / "model.openvino")
    loaded = runner.open_runner("openvino", str(artifact.path), {}, 1)  # the precision from the IR alone
    assert loaded.version.startswith("openvino ") and "CPU (" in loaded.version and loaded.version.endswith(", f32)")
    assert "inference precision f32" in loaded.notes[0] and loaded.threads_in_use() == 1
    default = ov.Core().compile_model(_read(artifact.path), "CPU").get_property("INFERENCE_PRECISION_HINT")
    # Why it is pinned: on a CPU with bf16 the plugin's own default is bf16.
    assert (default.get_type_name() == "bf16") == HAS_BF16


def test_an_ir_edgeship_did_not_write_runs_at_the_plugins_default_and_the_notes_say_so(tmp_path) -> None:
    import openvino as ov
    import torch

    module = torch.nn.Sequential(torch.nn.Linear(4, 2)).eval()
    ov.save_model(ov.convert_model(torch.export.export(module, (torch.rand(1, 4),))), str(tmp_path / "model.xml"))
    loaded = runner.open_runner("openvino", str(tmp_path), {}, 1)
    assert "(the plugin's default: none was asked)" in loaded.notes[0]
    assert loaded.version.endswith(", bf16)" if HAS_BF16 else ", f32)")


@pytest.mark.skipif(not HAS_BF16, reason=system.reason("cpu", "this CPU has no bf16 instructions"))
def test_openvino_bf16_computes_in_bf16_and_is_lossier_than_fp32(tiny_model, tmp_path) -> None:
    artifact, predict = _lower(tiny_model, tmp_path / "model.openvino", precision="bf16")
    assert openvino_device._ov_rt_precision(_read(artifact.path)) == "bf16"
    assert any(n.startswith("bf16 (") and "host can compute it" in n for n in artifact.notes), artifact.notes
    assert 25 <= sqnr_against_eager(tiny_model, predict) < 60
    assert runner.open_runner("openvino", str(artifact.path), {}, 1).version.endswith(", bf16)")


def test_a_bf16_ir_names_the_target_cpus_that_cannot_compute_it_and_is_not_measured_on_such_a_host(
        tiny_model, tmp_path, monkeypatch) -> None:
    from edgeship.quantize import cpu_choice

    artifact, _ = _lower(tiny_model, tmp_path / "model.openvino", precision="bf16",
                         cpus=[("xeon", XEON), ("box", EPYC)], load=False)  # this CPU may have no bf16
    note = next(n for n in artifact.notes if n.startswith("bf16 ("))
    assert "xeon can compute it" in note and "box (AMD EPYC 7B13) cannot" in note
    backend = BACKENDS["openvino"]
    monkeypatch.setattr(cpu_choice, "cpu_facts", lambda: EPYC)
    reason = backend.unavailable_here(backend.parse_options({}), "bf16")
    assert reason and reason.startswith("this CPU (AMD EPYC 7B13) has no bf16 instructions")
    assert backend.unavailable_here(backend.parse_options({}), "fp32") is None
    monkeypatch.setattr(cpu_choice, "cpu_facts", lambda: XEON)
    assert backend.unavailable_here(backend.parse_options({}), "bf16") is None


@pytest.mark.skipif(not HAS_BF16, reason=system.reason("cpu", "this CPU has no bf16 instructions"))
def test_the_runner_refuses_a_bf16_ir_on_a_cpu_without_bf16(tiny_model, tmp_path, monkeypatch) -> None:
    artifact, _ = _lower(tiny_model, tmp_path / "model.openvino", precision="bf16")
    monkeypatch.setattr(runner, "cpu_facts", lambda: EPYC)
    with pytest.raises(RuntimeError, match=r"AMD EPYC 7B13\) has no bf16 instructions"):
        runner.open_runner("openvino", str(artifact.path), {}, 1)


def test_openvino_fp16_stores_f16_weights_in_half_the_file(tiny_model, tmp_path) -> None:
    fp32, _ = _lower(tiny_model, tmp_path / "a" / "model.openvino")
    fp16, predict = _lower(tiny_model, tmp_path / "b" / "model.openvino", precision="fp16")
    assert fp16.details["weight_constants"].get("f16", 0) > 0 and fp16.details["inference_precision"] == "f32"
    assert fp16.details["files"]["model.bin"] < 0.6 * fp32.details["files"]["model.bin"]
    assert sqnr_against_eager(tiny_model, predict) >= 45


def test_openvino_from_onnx_when_asked_and_when_the_capture_does_not_convert(tiny_model, tmp_path,
                                                                             monkeypatch) -> None:
    import openvino as ov

    artifact, predict = _lower(tiny_model, tmp_path / "a" / "model.openvino", convert_from="onnx")
    assert artifact.details["converted_from"] == "onnx" and sqnr_against_eager(tiny_model, predict) >= 60
    real = ov.convert_model

    def no_torch(model, **kwargs):
        if not isinstance(model, str):
            raise RuntimeError("Cannot convert operation aten::made_up")
        return real(model, **kwargs)
    monkeypatch.setattr(ov, "convert_model", no_torch)
    artifact, predict = _lower(tiny_model, tmp_path / "b" / "model.openvino")
    assert artifact.details["converted_from"] == "onnx"
    assert any("aten::made_up" in n and "converted from ONNX instead" in n for n in artifact.notes)
    with pytest.raises(LoweringError, match="could not convert the export capture: RuntimeError: .*aten::made_up"):
        _lower(tiny_model, tmp_path / "c" / "model.openvino", convert_from="export")


def test_the_ir_is_the_same_in_every_process_whatever_was_converted_before(tiny_model, tmp_path) -> None:
    from edgeship.devices.hashing import sha256_path

    first, _ = _lower(tiny_model, tmp_path / "a" / "model.openvino")
    _lower(tiny_model, tmp_path / "b" / "model.openvino", precision="fp16")  # moves the converter's counters
    again, _ = _lower(tiny_model, tmp_path / "c" / "model.openvino")
    assert sha256_path(first.path) == sha256_path(again.path)


def test_the_int8_ir_is_the_same_in_every_process(tiny_model, tmp_path) -> None:
    import subprocess
    import sys

    from edgeship.devices.hashing import sha256_path

    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).parents[3])!r})\n"
              "from pathlib import Path\n"
              "from edgeship.model import load_model\nfrom edgeship.spec import load_spec\n"
              "from edgeship.quantize.settings import QuantizationSettings\n"
              "from tests.backends.openvino.test_lower import _calibration, _lower\n"
              f"model = load_model(load_spec({str(tiny_model.spec.source)!r}))\n"
              "_lower(model, Path(sys.argv[1]) / 'warm' / 'model.openvino')  # moves the counters\n"
              "_lower(model, Path(sys.argv[1]) / 'q' / 'model.openvino', precision='int8',\n"
              "       calibration=_calibration(model), quantization=QuantizationSettings(sensitivity=False))\n")
    artifact, _ = _lower(tiny_model, tmp_path / "here" / "model.openvino", precision="int8",
                         calibration=_calibration(tiny_model), quantization=QuantizationSettings(sensitivity=False))
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "there")], check=True, capture_output=True)
    assert sha256_path(artifact.path) == sha256_path(tmp_path / "there" / "q" / "model.openvino")


def test_openvino_converts_a_trace_capture(tiny_model, tmp_path) -> None:
    artifact, predict = _lower(tiny_model, tmp_path / "model.openvino", method="trace")
    assert artifact.details["converted_from"] == "torchscript" and sqnr_against_eager(tiny_model, predict) >= 60


def test_openvino_int8_by_nncf_with_sensitivity_and_keep_float(tiny_model, tmp_path) -> None:
    import json

    data = _calibration(tiny_model)
    q = QuantizationSettings(method="mean-minmax")
    artifact, predict = _lower(tiny_model, tmp_path / "a" / "model.openvino", precision="int8", quantization=q,
                               calibration=data, fast_bias_correction=False)
    details = artifact.details["quantization"]
    assert details["engine"].startswith("NNCF") and details["samples"] == 32 and details["subset_size"] == 32
    assert details["fake_quantize_nodes"] > 0 and artifact.details["operators"]["FakeQuantize"] > 0
    assert details["fast_bias_correction"] is False and details["kept_float"] == []
    report = json.loads((tmp_path / "a" / "sensitivity.json").read_text())
    assert {row["op"] for row in report["layers"]} >= {"Convolution", "MatMul"}
    assert sqnr_against_eager(tiny_model, predict) >= 20
    worst = report["layers"][0]["layer"]
    kept, _ = _lower(tiny_model, tmp_path / "b" / "model.openvino", precision="int8", calibration=data,
                     quantization=QuantizationSettings(keep_float=1), fast_bias_correction=False)
    assert kept.details["quantization"]["kept_float"] == [worst]
    def feeds(path: Path) -> set[str]:
        (op,) = [op for op in _read(path).get_ordered_ops() if op.get_friendly_name() == worst]
        return {i.get_source_output().get_node().get_type_name() for i in op.inputs()}
    assert "FakeQuantize" in feeds(artifact.path) and "FakeQuantize" not in feeds(kept.path)


def test_openvino_int8_methods_change_the_ranges(tiny_model, tmp_path) -> None:
    data = _calibration(tiny_model)
    outputs = {}
    for method in ("minmax", "mean-minmax"):
        settings = QuantizationSettings(method=method, sensitivity=False)
        artifact, predict = _lower(tiny_model, tmp_path / method / "model.openvino", precision="int8",
                                   calibration=data, quantization=settings)
        assert artifact.details["quantization"]["method"] == method
        outputs[method] = predict([next(iter(data.inputs.values()))[:1]])[0]
    assert not np.array_equal(outputs["minmax"], outputs["mean-minmax"])


def test_openvino_runs_the_specs_dynamic_dimensions(tmp_path) -> None:
    from tests.lowering.test_dynamic_shapes import CONV, loaded

    artifact, _ = _lower(loaded(CONV), tmp_path / "model.openvino")
    assert any(n.startswith("ran at the spec's sizes") for n in artifact.notes), artifact.notes
    assert artifact.details["inputs"][0]["shape"] == "[1,3,8..32,8..24]"


def test_plan_time_checks_of_openvino_variants(tmp_path) -> None:
    from edgeship.profile import load_profile

    def profile(body: str):
        (tmp_path / "p.toml").write_text(body)
        return load_profile(tmp_path / "p.toml")

    with pytest.raises(ProfileError, match="options.inference_precision is for int8 variants"):
        profile('[[variants]]\nname = "a"\nbackend = "openvino"\noptions = { inference_precision = "bf16" }\n')
    with pytest.raises(ProfileError, match='precision = "bf16": backend onnx supports'):
        profile('[[variants]]\nname = "a"\nbackend = "onnx"\nprecision = "bf16"\n')
    with pytest.raises(ProfileError, match="mean-minmax"):
        profile('[[variants]]\nname = "a"\nbackend = "onnx"\nprecision = "int8"\n'
                'quantization = { method = "mean-minmax" }\n')
    with pytest.raises(ProfileError, match="dynamic"):
        profile('[[variants]]\nname = "a"\nbackend = "openvino"\nprecision = "int8"\n'
                'quantization = { scheme = "dynamic" }\n')
    variants = profile('[[variants]]\nname = "a"\nbackend = "openvino"\nprecision = "bf16"\n'
                       '[[variants]]\nname = "b"\nbackend = "openvino"\n'
                       '[[variants]]\nname = "c"\nbackend = "openvino"\nprecision = "int8"\n'
                       'options = { inference_precision = "bf16" }\n').variants
    assert [depends_on_cpu(v) for v in variants] == [True, False, True]


def test_the_stage_key_of_a_bf16_variant_holds_the_target_cpus_lacking_bf16(tmp_path, tiny_project) -> None:
    from edgeship.pipeline.plan import BuildRequest, make_plan
    from edgeship.pipeline.stagecache import StageKeys
    from tests.conftest import write_profile

    profile = write_profile(tmp_path, '[[variants]]\nname = "a"\nbackend = "openvino"\nprecision = "bf16"\n'
                                      '[[variants]]\nname = "b"\nbackend = "openvino"\n')
    plan = make_plan(BuildRequest(target=str(profile), model=str(tiny_project / "model.toml")))
    bf16, fp32 = plan.profile.variants
    assert StageKeys(plan, [("x", XEON)]).artifact(bf16)["cpu"]["openvino_bf16"] == {"lacking_bf16": []}
    assert StageKeys(plan, [("e", EPYC)]).artifact(bf16)["cpu"]["openvino_bf16"] == {"lacking_bf16": ["e"]}
    assert "cpu" not in StageKeys(plan, [("e", EPYC)]).artifact(fp32)


def _widest_int8_weight(path: Path) -> dict[str, int]:
    """The largest |value| of the IR's int8 weight constants, by the layer type they feed (NNCF's 7-bit
    weights reach 64, 8-bit ones 127); the first layer's weights are left out (NNCF keeps them 7-bit
    by default)."""
    model = _read(path)
    widest: dict[str, int] = {}
    layers = [op for op in model.get_ordered_ops() if op.get_type_name() in ("Convolution", "MatMul")]
    for op in layers[1:]:
        node = op.input_value(1).get_node()
        while node.get_type_name() != "Constant" and node.get_input_size():
            node = node.input_value(0).get_node()
        if node.get_element_type().get_type_name() == "i8":
            widest[op.get_type_name()] = max(widest.get(op.get_type_name(), 0), int(np.abs(node.get_data()).max()))
    return widest


@pytest.mark.parametrize(("cpus", "chosen", "widest"), [
    ([("edge", EPYC)], "enable", 64),                   # AVX2 without VNNI: 7-bit weights in every layer
    ([("server", XEON)], "first_layer_only", 127),      # VNNI and AMX: NNCF's default
    ([("server", XEON), ("edge", EPYC)], "enable", 64),  # one CPU without VNNI decides
])
def test_openvino_int8_chooses_overflow_fix_from_the_target_cpus(tiny_model, tmp_path, cpus, chosen, widest) -> None:
    artifact, predict = _lower(tiny_model, tmp_path / "model.openvino", precision="int8", cpus=cpus,
                               calibration=_calibration(tiny_model),
                               quantization=QuantizationSettings(sensitivity=False))
    details = artifact.details["quantization"]
    assert details["overflow_fix"] == chosen and details["overflow_fix_reason"] in artifact.notes
    assert details["cpus"][0]["device"] == cpus[0][0]
    assert details["overflow_fix_reason"].startswith(f"overflow_fix {chosen}")
    assert max(_widest_int8_weight(artifact.path).values()) <= widest
    if chosen == "enable":  # runs right on any CPU, this one included (an IR for VNNI CPUs may not, here)
        assert "edge's CPU has no VNNI (AMD EPYC 7B13: AVX2 without VNNI" in details["overflow_fix_reason"]
        assert sqnr_against_eager(tiny_model, predict) >= 20
    else:
        assert max(_widest_int8_weight(artifact.path).values()) > 64


def test_openvino_int8_overflow_fix_set_in_the_profile_wins(tiny_model, tmp_path) -> None:
    artifact, _ = _lower(tiny_model, tmp_path / "model.openvino", precision="int8", cpus=[("edge", EPYC)],
                         calibration=_calibration(tiny_model), quantization=QuantizationSettings(sensitivity=False),
                         overflow_fix="disable")
    details = artifact.details["quantization"]
    assert details["overflow_fix"] == "disable"
    assert details["overflow_fix_reason"] == ("overflow_fix = disable set in the profile (8-bit weights); no VNNI on "
                                              "edge: u8 x s8 pairs can saturate int16 there")
    assert max(_widest_int8_weight(artifact.path).values()) > 64
    with pytest.raises(ProfileError, match='overflow_fix = "on": not allowed; one of: disable, enable, '
                                           'first_layer_only'):
        BACKENDS["openvino"].parse_options({"overflow_fix": "on"})


def test_openvino_sensitivity_reads_layers_whose_output_the_model_returns(tmp_path) -> None:
    import json

    from edgeship.model import load_model
    from edgeship.spec import load_spec

    model = load_model(load_spec("tests.models.tinynet:build_layer_outputs", "1,16"))
    shape = model.spec.inputs[0].shape[1:]
    data = Dataset({model.spec.inputs[0].name: np.random.default_rng(3).random((16, *shape), dtype=np.float32)},
                   None, "test")
    artifact, _ = _lower(model, tmp_path / "v" / "model.openvino", precision="int8", calibration=data,
                         quantization=QuantizationSettings(keep_float=1))
    layers = json.loads((tmp_path / "v" / "sensitivity.json").read_text())["layers"]
    assert sorted(row["op"] for row in layers) == ["MatMul", "MatMul"]
    assert all(row["sqnr_db"] is None or row["sqnr_db"] > 10 for row in layers)
    assert artifact.details["quantization"]["kept_float"] == [layers[0]["layer"]]



def test_openvino_int8_falls_back_to_fast_bias_correction_where_nncf_refuses_the_full_one(tmp_path) -> None:
    from edgeship.model import load_model
    from edgeship.spec import load_spec

    model = load_model(load_spec("tests.models.tinynet:build_branchy", "1,3,16,16"))
    artifact, predict = _lower(model, tmp_path / "v" / "model.openvino", precision="int8", method="script",
                               calibration=_calibration(model, 16), fast_bias_correction=False,
                               quantization=QuantizationSettings(sensitivity=False))
    details = artifact.details["quantization"]
    assert artifact.details["operators"]["If"] == 1 and details["fake_quantize_nodes"] > 0
    assert details["fast_bias_correction"] is False and details["bias_correction"] == "fast"
    assert details["bias_correction_refused"] == [
        "full (The BiasCorrection algorithm is not supported for OpenVINO models with If operation.)"]
    assert "bias correction fast: NNCF refused full (The BiasCorrection algorithm" in " ".join(artifact.notes)
    assert sqnr_against_eager(model, predict) >= 20
