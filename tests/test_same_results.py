"""The same build gives the same results.json as before a refactor: the "a backend is one package"
redesign moved every backend's code and must change nothing a user sees.

``tests/fixtures/results-before-backends.json`` is this test's build (the tiny model, every backend
that lowers here), made with edgeship as it was before the redesign (c66db53) and normalized by
``normalized`` below. The build now must match it: every variant, file name, option, note, detail,
gate and figure, with what cannot repeat left out (times, timestamps, hashes and sizes of artifacts:
TorchScript records the Python stack of edgeship's own code in its debug info, and AOTInductor's
packages differ from build to build) and figures that vary by CPU compared within a tolerance. The
profile pins every setting that is chosen by CPU, so the comparison holds on any x86 CPU.

Regenerate after a change that is meant to change results: ``EDGESHIP_WRITE_GOLDEN=1 pytest
tests/test_same_results.py``, and say why in the commit.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_profile

GOLDEN = Path(__file__).parent / "fixtures" / "results-before-backends.json"
VARIANTS = """
[[variants]]
name = "mobile-fp32"
backend = "pytorch-mobile"

[[variants]]
name = "et-fp32"
backend = "executorch"

[[variants]]
name = "et-int8"
backend = "executorch"
precision = "int8"
gates = { min_sqnr_db = 10.0, max_top1_drop = 100.0 }

[[variants]]
name = "onnx-fp32"
backend = "onnx"

[[variants]]
name = "onnx-int8"
backend = "onnx"
precision = "int8"
options = { reduce_range = true }
gates = { min_sqnr_db = 10.0, max_top1_drop = 100.0 }

[[variants]]
name = "ov-fp32"
backend = "openvino"

[[variants]]
name = "ov-int8"
backend = "openvino"
precision = "int8"
options = { overflow_fix = "enable" }
gates = { min_sqnr_db = 10.0, max_top1_drop = 100.0 }

[[variants]]
name = "aoti-fp32"
backend = "aoti"
options = { isa = "avx2" }

[[variants]]
name = "ts-fp32"
backend = "torchscript"

[[variants]]
name = "web-fp32"
backend = "onnx-web"

[[variants]]
name = "trt-fp16"
backend = "tensorrt"
precision = "fp16"

[[variants]]
name = "coreml-fp16"
backend = "coreml"
precision = "fp16"
"""
# Keys whose values cannot repeat from build to build or machine to machine.
DROPPED = {"created", "build_key", "toolchain", "seconds", "capture_seconds", "sha256", "size_bytes", "measured_at",
           "cpu", "cpus", "inputs_sha256", "reference_sha256", "node", "node_interval", "other_cpu_load",
           "contended", "attempts", "cv_above_max", "vs_first_device", "load_ms", "peak_rss_mb", "reused",
           "p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "cv", "weights_sha256", "size_mb", "build_cpu",
           "build_flags", "compiler", "cache", "key",  # key: a cache key, which hashes edgeship's source
           "import_ms", "first_inference_ms", "rss_over_baseline_mb",  # cold start and memory: added after it
           "kernels"}  # what an aoti package calls (lowering.details): added after it
# Notes that say how busy the machine was while a row was timed (its "contended" and "cv" keys are dropped too)
UNSTEADY = re.compile(r"^(unsteady: cv |contended: other processes kept ).*")
TOLERANCE_DB = 0.5  # SQNR of the same artifact on another CPU's kernels


def normalized(doc: Any, roots: dict[str, str]) -> Any:
    """``doc`` without what cannot repeat, paths written relative to ``roots`` (path -> its name)."""
    if isinstance(doc, dict):
        return {k: normalized(v, roots) for k, v in doc.items() if k not in DROPPED and not k.endswith("_seconds")}
    if isinstance(doc, list):
        return [normalized(v, roots) for v in doc if not (isinstance(v, str) and UNSTEADY.match(v))]
    if isinstance(doc, str):
        for path, name in sorted(roots.items(), key=lambda kv: -len(kv[0])):
            doc = doc.replace(path, name)
        return re.sub(r"calibration cache (hit|miss)", "calibration cache <hit or miss>", doc)
    return doc


def differences(before: Any, now: Any, path: str = "") -> list[str]:
    """Where ``now`` differs from ``before``: floats within their tolerance count as equal."""
    if isinstance(before, dict) and isinstance(now, dict):
        keys = [f"{path}.{k}: only {'before' if k in before else 'now'}" for k in sorted(set(before) ^ set(now))]
        return keys + [d for k in sorted(set(before) & set(now)) for d in differences(before[k], now[k], f"{path}.{k}")]
    if isinstance(before, list) and isinstance(now, list):
        if len(before) != len(now):
            return [f"{path}: {len(before)} items before, {len(now)} now"]
        return [d for i, (b, n) in enumerate(zip(before, now)) for d in differences(b, n, f"{path}[{i}]")]
    if isinstance(before, float) and isinstance(now, (int, float)) and not isinstance(now, bool):
        tolerance = TOLERANCE_DB if path.endswith("_db") else max(1e-3, 1e-2 * abs(before))
        return [] if math.isclose(before, now, abs_tol=tolerance) else [f"{path}: {before} before, {now} now"]
    return [] if before == now else [f"{path}: {before!r} before, {now!r} now"]


@pytest.mark.slow
def test_the_same_build_gives_the_same_results_as_before_the_redesign(tiny_project: Path, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, VARIANTS, name="same")
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cache")}  # cold: every stage computed
    proc = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
                           str(tiny_project / "model.toml"), "--out", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    now = normalized(json.loads((tmp_path / "out" / "results.json").read_text()),
                     {str(tmp_path): "<tmp>", str(Path.cwd()): "<repo>"})
    if os.environ.get("EDGESHIP_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    found = differences(normalized(json.loads(GOLDEN.read_text()), {}), now)
    assert not found, "results.json differs from the build before the redesign:\n" + "\n".join(found[:40])


def test_the_comparison_sees_a_changed_figure_and_a_renamed_key() -> None:
    before = {"variants": [{"accuracy": {"sqnr_db": 30.0, "top1": 0.99}, "notes": ["a"], "seconds": 1.0}]}
    same = {"variants": [{"accuracy": {"sqnr_db": 30.3, "top1": 0.99}, "notes": ["a"], "seconds": 9.0}]}
    assert differences(normalized(before, {}), normalized(same, {})) == []
    busy = {"variants": [{"accuracy": {"sqnr_db": 30.0, "top1": 0.99}, "notes": ["a", "contended: other processes kept "
                          "1.2 CPU(s) busy on host while it was timed"], "contended": True}]}
    assert differences(normalized(before, {}), normalized(busy, {})) == []
    moved = {"variants": [{"accuracy": {"sqnr_db": 31.0, "top_1": 0.99}, "notes": ["b"]}]}
    assert differences(normalized(before, {}), normalized(moved, {})) == [
        ".variants[0].accuracy.top1: only before", ".variants[0].accuracy.top_1: only now",
        ".variants[0].accuracy.sqnr_db: 30.0 before, 31.0 now", ".variants[0].notes[0]: 'a' before, 'b' now"]
