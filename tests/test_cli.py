"""The command line: exit codes and messages for bad input, refusals and failed gates."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch

from edgeship.cli import main
from tests.conftest import write_profile
from tests.test_model import CodePayload

ONNX_ONLY = """
[[variants]]
name = "ort"
backend = "onnx"
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_bad_profile_exits_2_before_the_model_is_imported(capsys, tiny_project: Path, tmp_path) -> None:
    marker = tmp_path / "imported"
    (tiny_project / "sentinel.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef build(): pass\n")
    spec = tiny_project / "model.toml"
    spec.write_text(spec.read_text().replace("tinynet:build", "sentinel:build").replace('weights = "tiny.pt"\n', ""))
    profile = write_profile(tmp_path, ONNX_ONLY + "optoins = {}\n")
    code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(spec))
    assert code == 2 and str(profile) in err and 'did you mean "options"' in err
    assert "Traceback" not in err and not marker.exists()


def test_cli_unknown_target_exits_2_listing_known_ones(capsys) -> None:
    code, _, err = run(capsys, "build", "--target", "hots")
    assert code == 2 and "known targets:" in err and 'did you mean "host"' in err


def test_cli_code_carrying_checkpoint_exits_2_and_nothing_runs(capsys, tiny_project: Path, tmp_path) -> None:
    marker = tmp_path / "pwned"
    torch.save({"state_dict": {}, "x": CodePayload(marker)}, tiny_project / "tiny.pt")
    profile = write_profile(tmp_path, ONNX_ONLY)
    code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
                       "--out", str(tmp_path / "out"))
    assert code == 2 and "refused" in err and "--trust-weights" in err
    assert not marker.exists() and not (tmp_path / "out" / "results.json").exists()


def test_cli_uncapturable_model_exits_2_naming_every_method(capsys, tmp_path) -> None:
    profile = write_profile(tmp_path, ONNX_ONLY)
    code, _, err = run(capsys, "build", "--target", str(profile), "--model",
                       "tests.models.tinynet:build_uncapturable", "--input-shape", "1,3",
                       "--out", str(tmp_path / "out"))
    assert code == 2 and "could not be captured" in err
    for method in ("export:", "trace:", "script:"):
        assert method in err


def test_cli_failed_gate_exits_3_and_still_writes_results(capsys, tiny_project: Path, tmp_path) -> None:
    profile = write_profile(tmp_path, ONNX_ONLY + "gates = { min_sqnr_db = 1000.0 }\n")
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
                         "--out", str(out_dir), "--quiet")
    assert code == 3 and "failed validation: ort" in err and "FAIL" in out
    results = json.loads((out_dir / "results.json").read_text())
    ort = results["variants"][1]
    assert ort["gates"]["passed"] is False and "< 1000" in ort["gates"]["failures"][0]
    assert (out_dir / ort["file"]).is_file()


def test_cli_lowering_failure_is_recorded_and_others_still_build(capsys, tiny_project: Path, tmp_path) -> None:
    variants = ONNX_ONLY + textwrap.dedent("""
        [[variants]]
        name = "too-old"
        backend = "pytorch-mobile"
        options = { bytecode_version = 3 }
        """)
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, "build", "--target", str(write_profile(tmp_path, variants)),
                       "--model", str(tiny_project / "model.toml"), "--out", str(out_dir), "--quiet")
    results = json.loads((out_dir / "results.json").read_text())
    rows = {v["name"]: v for v in results["variants"]}
    assert code == 3 and rows["ort"]["gates"]["passed"] and rows["ort"]["latency"][0]["p50_ms"] > 0
    assert "bytecode version 8 down to 3" in rows["too-old"]["error"] and rows["too-old"]["file"] is None
    assert (out_dir / "too-old" / "lowering.log").is_file()


def test_cli_unknown_device_without_devices_file_exits_2(capsys) -> None:
    code, _, err = run(capsys, "build", "--target", "host", "--device", "pixel8")
    assert code == 2 and "--device pixel8" in err


def test_cli_module_callable_without_input_shape_exits_2(capsys) -> None:
    code, _, err = run(capsys, "build", "--target", "host", "--model", "tests.models.tinynet:build")
    assert code == 2 and "--input-shape" in err and "Traceback" not in err


def test_cli_op_the_converter_cannot_take_fails_that_variant_only(capsys, tmp_path) -> None:
    variants = textwrap.dedent("""
        [[variants]]
        name = "cm"
        backend = "coreml"
        precision = "fp16"

        [[variants]]
        name = "lite"
        backend = "pytorch-mobile"
        """)
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, "build", "--target", str(write_profile(tmp_path, variants)), "--model",
                       "tests.models.tinynet:build_inverse", "--input-shape", "1,4,4", "--out", str(out_dir))
    rows = {v["name"]: v for v in json.loads((out_dir / "results.json").read_text())["variants"]}
    assert code == 3 and "linalg_inv" in rows["cm"]["error"] and "lower cm" in err
    assert rows["lite"]["file"] and rows["lite"]["gates"]["passed"]
