"""The command line: exit codes and messages for bad input, refusals and failed gates."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import torch

from edgeship.cli import main
from tests import system
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


def sentinel_spec(tiny_project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The tiny project's spec with an entry that leaves a marker file when it is imported."""
    marker = tmp_path / "imported"
    (tiny_project / "sentinel.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef build(): pass\n")
    spec = tiny_project / "model.toml"
    spec.write_text(spec.read_text().replace("tinynet:build", "sentinel:build").replace('weights = "tiny.pt"\n', ""))
    return spec, marker


@pytest.mark.parametrize("literal", ["nan", "inf", "-inf"])
def test_cli_non_finite_gate_exits_2_before_the_model_is_imported(capsys, tiny_project: Path, tmp_path,
                                                                  literal: str) -> None:
    spec, marker = sentinel_spec(tiny_project, tmp_path)
    profile = write_profile(tmp_path, ONNX_ONLY + f"gates = {{ min_sqnr_db = {literal} }}\n")
    code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(spec), "--out", str(tmp_path / "o"))
    assert code == 2 and f"{profile}: variants[0].gates.min_sqnr_db = {literal}: not a finite number" in err
    assert "Traceback" not in err and not marker.exists()


def test_cli_out_that_is_a_file_exits_2_before_the_model_is_imported(capsys, tiny_project: Path, tmp_path) -> None:
    spec, marker = sentinel_spec(tiny_project, tmp_path)
    (tmp_path / "afile").write_text("mine")
    profile = write_profile(tmp_path, ONNX_ONLY)
    for out, says in ((tmp_path / "afile", "is a file; expected a folder"),
                      (tmp_path / "afile" / "sub", f"cannot be created: {tmp_path / 'afile'} is a file")):
        code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(spec), "--out", str(out))
        assert code == 2 and f"error: --out {out}: {says}" in err and "Traceback" not in err
    assert not marker.exists() and (tmp_path / "afile").read_text() == "mine"


def test_cli_out_that_is_not_writable_exits_2(capsys, tiny_project: Path, tmp_path, monkeypatch) -> None:
    # Tests run as root, for whom every folder is writable: a folder os.access says is not stands in.
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    profile = write_profile(tmp_path, ONNX_ONLY)
    code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
                       "--out", str(locked / "out"))
    assert code == 2 and f"--out {locked / 'out'}: cannot be created: {locked} is not writable" in err
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(locked / "cache"))
    code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
                       "--out", str(tmp_path / "out"))
    assert code == 2 and f"cache folder ($EDGESHIP_CACHE_DIR) {locked / 'cache'}: cannot be created" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.access("/proc/sys", os.W_OK),
                    reason=system.reason("os", "/proc/sys is writable here (no read-only mount)"))
def test_cli_out_on_a_read_only_mount_exits_2(capsys, tiny_project: Path, tmp_path) -> None:
    profile = write_profile(tmp_path, ONNX_ONLY)
    code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
                       "--out", "/proc/sys/edgeship-out")
    assert code == 2 and "--out /proc/sys/edgeship-out: cannot be created: /proc/sys is not writable" in err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason=system.reason("os", "no /proc here"))
def test_cli_out_that_cannot_be_made_exits_2(capsys, tiny_project: Path, tmp_path) -> None:
    # os.access says /proc is writable for root, but no folder can be made in it.
    profile = write_profile(tmp_path, ONNX_ONLY)
    code, _, err = run(capsys, "build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
                       "--out", "/proc/edgeship-out")
    assert code == 2 and "--out /proc/edgeship-out: cannot be written" in err and "Traceback" not in err


def test_cli_cache_dir_that_is_a_file_exits_2(capsys, tiny_project: Path, tmp_path, monkeypatch) -> None:
    spec, marker = sentinel_spec(tiny_project, tmp_path)
    (tmp_path / "cachefile").write_text("")
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(tmp_path / "cachefile"))
    code, _, err = run(capsys, "build", "--target", str(write_profile(tmp_path, ONNX_ONLY)), "--model", str(spec),
                       "--out", str(tmp_path / "o"))
    assert code == 2 and f"cache folder ($EDGESHIP_CACHE_DIR) {tmp_path / 'cachefile'}: is a file" in err
    assert not marker.exists()
    code, _, err = run(capsys, "cache", "info")
    assert code == 2 and "is a file" in err


def test_cli_spec_with_more_inputs_than_forward_takes_exits_2(capsys, tiny_project: Path, tmp_path) -> None:
    spec = tiny_project / "model.toml"
    spec.write_text(spec.read_text().replace('inputs = [{ name = "image", shape = [1, 3, 16, 16], dtype = "float32" }]',
                                             'inputs = [{ name = "image", shape = [1, 3, 16, 16] }, '
                                             '{ name = "extra", shape = [1, 3] }]'))
    spec.write_text(spec.read_text().replace("[data]\ncalibration = \"calib.npz\"\nevaluation = \"eval.npz\"\n", ""))
    code, _, err = run(capsys, "build", "--target", str(write_profile(tmp_path, ONNX_ONLY)), "--model", str(spec),
                       "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and "Traceback" not in err
    assert f"{spec}: the spec has 2 input(s) (image, extra), but TinyNet.forward(x) takes 1 input(s)" in err


def test_cli_model_that_raises_on_the_spec_inputs_exits_2(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "build", "--target", str(write_profile(tmp_path, ONNX_ONLY)), "--model",
                       "tests.models.tinynet:build", "--input-shape", "1,3", "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and "Traceback" not in err
    assert ("--model tests.models.tinynet:build: the model raised RuntimeError on the spec's inputs "
            "(input [1, 3] float32)") in err


def test_cli_input_shape_with_a_bad_element_exits_2_naming_it(capsys) -> None:
    code, _, err = run(capsys, "build", "--target", "host", "--model", "tests.models.tinynet:build",
                       "--input-shape", "1,x,3")
    assert code == 2 and "--input-shape '1,x,3': element 2 ('x') is not a positive integer" in err


def test_cli_trusted_random_bytes_are_not_a_checkpoint(capsys, tiny_project: Path, tmp_path) -> None:
    (tiny_project / "tiny.pt").write_bytes(os.urandom(4096))
    code, _, err = run(capsys, "build", "--target", str(write_profile(tmp_path, ONNX_ONLY)), "--model",
                       str(tiny_project / "model.toml"), "--out", str(tmp_path / "o"), "--trust-weights", "--quiet")
    assert code == 2 and "tiny.pt: not a torch checkpoint torch.load can read" in err and "--trust-weights" not in err


@pytest.mark.parametrize("value", ["nan", "inf", "ten"])
def test_cli_report_threshold_must_be_a_finite_number(capsys, value: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(["report", "--threshold", value, "results.json"])
    assert e.value.code == 2 and "argument --threshold" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["build", "--target", "a\0b.toml"],
                                  ["build", "--target", "host", "--model", "m\0.toml"],
                                  ["build", "--target", "host", "--out", "o\0ut"],
                                  ["build", "--target", "host", "--devices", "d\0.toml"],
                                  ["devices", "--devices", "d\0.toml", "list"]])
def test_cli_path_with_a_nul_character_exits_2(capsys, argv: list[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and "a path cannot contain a NUL character" in err and "Traceback" not in err


def test_cli_output_piped_into_a_reader_that_leaves_ends_quietly_with_141(tmp_path) -> None:
    """`edgeship targets | head -1`: the reader closes the pipe; no "error: Broken pipe" and no traceback."""
    import subprocess
    import sys

    with subprocess.Popen([sys.executable, "-m", "edgeship", "targets"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=tmp_path) as proc:
        proc.stdout.close()   # the reader leaves before the first line (the command takes a second to start)
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    assert code == 141 and err == "", err
