"""The device protocol (devices/protocol.py): every key a job or result carries is declared there,
on the side that writes it and on the side that reads it, so a key renamed on one side only fails here."""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeship.devices import Job, LocalDevice
from edgeship.devices.adb import native_result
from edgeship.devices.base import RUNNER_FILES, JobResult, RunnerError
from edgeship.devices.browser import PAGE_UNMEASURED, page_result
from edgeship.devices.hashing import sha256_file
from edgeship.devices.native import NativeTimings
from edgeship.devices.protocol import (
    ALWAYS,
    JOB,
    PROTOCOL_VERSION,
    RESULT,
    WHEN_FAILED,
    WHEN_OK,
    job_problems,
    job_with_defaults,
    result_document,
    result_problems,
)
from tests.devices.test_standalone import on_device, script

PACKAGE = Path(__file__).resolve().parents[2] / "edgeship"


def _job(artifact: Path, inputs: Path, sha: str | None, runtime: str = "pytorch-mobile") -> Job:
    return Job(runtime=runtime, artifact=artifact, sha256=sha, inputs=inputs, input_names=["image"],
               batch=2, warmup=1, iterations=3, threads=1, timeout_s=120)


# ---- the runner's side, run for real ----

def test_every_key_the_runner_writes_into_a_result_is_declared(ptl, inputs, tmp_path) -> None:
    result = LocalDevice().run_job(_job(ptl, inputs, sha256_file(ptl)), tmp_path / "w")
    written = json.loads((tmp_path / "w" / "result.json").read_text())
    assert result_problems(written) == []
    assert written["protocol"] == PROTOCOL_VERSION and written["ok"] is True
    assert set(written) <= set(RESULT) and {"load_ms", "timings_ms", "cpu", "other_cpu_load"} <= set(written)
    assert result.document == written


def test_every_key_of_the_runners_failure_result_is_declared(ptl, inputs, tmp_path) -> None:
    with pytest.raises(RunnerError, match="does not match the expected"):
        LocalDevice().run_job(_job(ptl, inputs, "0" * 64), tmp_path / "w")
    written = json.loads((tmp_path / "w" / "result.json").read_text())
    assert result_problems(written) == [] and written["ok"] is False
    assert set(written) == {"protocol", "ok", "error", "traceback", "not_for_this_cpu"}


def test_a_result_with_a_renamed_key_fails_the_check_naming_both_keys(ptl, inputs, tmp_path) -> None:
    LocalDevice().run_job(_job(ptl, inputs, sha256_file(ptl)), tmp_path / "w")
    written = json.loads((tmp_path / "w" / "result.json").read_text())
    for key in written:  # any key renamed on the runner's side only
        renamed = {(key + "_v2" if k == key else k): v for k, v in written.items()}
        problems = result_problems(renamed)
        assert any(f"unknown key '{key}_v2'" in p for p in problems), (key, problems)
        if RESULT[key].required in (ALWAYS, WHEN_OK):
            assert any(f"missing key '{key}'" in p for p in problems), (key, problems)
    # the host reads it as a RunnerError naming the keys, never a KeyError
    folder = tmp_path / "renamed"
    folder.mkdir()
    doc = dict(written)
    doc["load_time_ms"] = doc.pop("load_ms")
    (folder / "result.json").write_text(json.dumps(doc))
    with pytest.raises(RunnerError, match=r"unknown key 'load_time_ms'.*renamed from 'load_ms'\?.*"
                                          r"missing key 'load_ms' \(number or null, required when ok\)"):
        JobResult.read_from(folder, 0, "")


def _device_folder(tmp_path: Path) -> Path:
    """What a device gets for a job: the runner and its sibling files, no edgeship."""
    folder = tmp_path / "device"
    folder.mkdir(parents=True)
    for name, path in RUNNER_FILES.items():
        (folder / name).write_bytes(path.read_bytes())
    np.savez(folder / "inputs.npz", image=np.zeros((2, 4), np.float32))
    return folder


def _refused(tmp_path: Path, job: dict) -> tuple[dict, RunnerError]:
    """``job`` run by the real runner.py, alone in a device folder (no edgeship importable):
    its result.json, and the error the host reads from it."""
    folder = _device_folder(tmp_path)
    (folder / "job.json").write_text(json.dumps(job))
    proc = on_device(folder, script("runner.py", "job.json"))
    assert proc.returncode == 1, proc.stderr
    written = json.loads((folder / "result.json").read_text())
    with pytest.raises(RunnerError) as error:
        JobResult.read_from(folder, proc.returncode, proc.stderr)
    return written, error.value


def _document(**changes) -> dict:
    job = Job(runtime="onnxruntime", artifact=Path("model.onnx"), sha256=None, inputs=Path("inputs.npz"),
              input_names=["image"], batch=1, warmup=1, iterations=2, threads=1, timeout_s=60)
    return {**job.document("model.onnx", "inputs.npz"), **changes}


def test_the_runner_refuses_a_job_of_another_protocol_version_naming_both(tmp_path) -> None:
    written, error = _refused(tmp_path, _document(protocol=PROTOCOL_VERSION + 1))
    assert written["ok"] is False and written["protocol"] == PROTOCOL_VERSION and not written["not_for_this_cpu"]
    expected = (f"job.json is device protocol {PROTOCOL_VERSION + 1}; this runner.py reads and writes protocol "
                f"{PROTOCOL_VERSION}")
    assert written["error"].startswith(expected) and "another edgeship" in written["error"]
    assert str(error).startswith(expected)


def test_the_runner_refuses_a_job_without_a_version_or_with_a_key_it_does_not_know(tmp_path) -> None:
    unversioned = _document()
    del unversioned["protocol"]
    written, error = _refused(tmp_path / "a", unversioned)
    assert "missing key 'protocol' (integer, required always" in written["error"]
    renamed = _document()
    renamed["deadline"] = renamed.pop("deadline_s")
    written, error = _refused(tmp_path / "b", renamed)
    assert written["error"] == (f"job.json does not follow device protocol {PROTOCOL_VERSION}: unknown key "
                                f"'deadline' in the job (not a field of protocol {PROTOCOL_VERSION}; renamed "
                                "from 'deadline_s'?)")
    assert "unknown key 'deadline'" in str(error)


def test_the_host_names_both_versions_for_a_result_of_another_version(tmp_path) -> None:
    (tmp_path / "result.json").write_text(json.dumps({"protocol": 7, "ok": False, "error": "it broke"}))
    with pytest.raises(RunnerError, match=f"result.json is device protocol 7; this edgeship reads protocol "
                                          f"{PROTOCOL_VERSION}: .* \\(its error: it broke\\)"):
        JobResult.read_from(tmp_path, 1, "")
    (tmp_path / "result.json").write_text(json.dumps({"ok": True, "runtime": "onnxruntime"}))  # an older runner's
    with pytest.raises(RunnerError, match="missing key 'protocol'.*before device protocols had versions"):
        JobResult.read_from(tmp_path, 0, "")
    (tmp_path / "result.json").write_text("[1, 2")
    with pytest.raises(RunnerError, match="not JSON"):
        JobResult.read_from(tmp_path, 0, "")


# ---- the host's side ----

def test_the_host_writes_jobs_that_follow_the_protocol() -> None:
    doc = _document()
    assert job_problems(doc) == [] and doc["protocol"] == PROTOCOL_VERSION and set(doc) == set(JOB)
    assert job_problems(json.loads(json.dumps(doc))) == []  # as the runner reads it
    eager = Job(runtime="eager", artifact=None, sha256=None, inputs=Path("i.npz"), input_names=["x", "y"], batch=4,
                warmup=0, iterations=0, threads=None, timeout_s=1.5, options={"spec": {}, "base_dir": "."})
    assert job_problems(eager.document(None, "i.npz")) == []


def test_a_job_key_renamed_on_the_host_side_only_fails_the_check() -> None:
    for key in _document():
        doc = _document()
        doc[key + "_v2"] = doc.pop(key)
        problems = job_problems(doc)
        assert any(f"unknown key '{key}_v2'" in p for p in problems), (key, problems)


def test_wrong_types_and_a_non_object_are_problems() -> None:
    assert job_problems(_document(threads="4", input_names=["a", 1], batch=True)) == [
        "key 'input_names' is array, not string[]", "key 'batch' is boolean, not integer",
        "key 'threads' is string, not integer or null"]
    assert job_problems([]) == ["the job is array, not a JSON object"]
    assert result_problems({"protocol": PROTOCOL_VERSION, "ok": False}) == [
        "missing key 'error' (string, required when failed)"]
    assert result_problems({"protocol": 1.0, "ok": True}) == [
        f"the result is device protocol 1.0; this side reads and writes protocol {PROTOCOL_VERSION}"]


def test_the_runner_reads_each_optional_job_field_at_the_protocols_default() -> None:
    doc = {"protocol": PROTOCOL_VERSION, "runtime": "onnxruntime", "inputs": "i.npz", "input_names": ["x"]}
    assert job_problems(doc) == []
    job = job_with_defaults(doc)
    assert set(job) == set(JOB) and job["batch"] == 1 and job["iterations"] == 100 and job["options"] == {}
    job["options"]["x"] = 1
    assert job_with_defaults(doc)["options"] == {}  # a fresh default each time


def test_a_result_is_built_only_of_declared_fields() -> None:
    assert result_document(ok=False, error="e") == {"protocol": PROTOCOL_VERSION, "ok": False, "error": "e"}
    with pytest.raises(KeyError, match="load_time_ms"):
        result_document(ok=True, load_time_ms=1.0)


def test_adb_results_follow_the_protocol() -> None:
    job = Job(runtime="executorch", artifact=Path("m.pte"), sha256=None, inputs=Path("i.npz"), input_names=["x"],
              batch=1, warmup=5, iterations=3, threads=None, timeout_s=60)
    per_run = native_result(job, "executor_runner", NativeTimings([1.0, 2.5, 2.0], 1.83, 3, 40.0))
    mean_only = native_result(job, "executor_runner", NativeTimings(None, 15.0, 8, None))
    assert result_problems(per_run) == [] and result_problems(mean_only) == []
    assert per_run["timings_ms"] == [1.0, 2.5, 2.0] and "summary_ms" not in per_run
    assert per_run["first_inference_ms"] is None and per_run["rss_over_baseline_mb"] is None
    assert per_run["notes"] == ["import_ms, first_inference_ms, rss_over_baseline_mb not measured: executor_runner "
                                "prints no first run apart from the others and no memory of its process"]
    assert mean_only["notes"][0].startswith("import_ms, load_ms, first_inference_ms, rss_over_baseline_mb not")
    assert mean_only["timings_ms"] == [] and mean_only["summary_ms"] == {"mean_ms": 15.0}


def test_browser_results_follow_the_protocol() -> None:
    job = Job(runtime="onnxruntime-web", artifact=Path("m.onnx"), sha256=None, inputs=Path("i.npz"),
              input_names=["x"], batch=1, warmup=1, iterations=2, threads=None, timeout_s=60)
    info = {"threads": 2, "loadMs": 12.5, "ortVersion": "1.22.0", "userAgent": "Mozilla/5.0 HeadlessChrome",
            "crossOriginIsolated": True, "hardwareConcurrency": 2}  # what the page says (web/runner.mjs)
    doc = page_result(job, info, 9.5, [3.0, 4], 5, "140.0.7339.16")
    assert result_problems(doc) == [] and doc["load_ms"] == 12.5 and doc["samples"] == 5
    assert doc["first_inference_ms"] == 9.5 and doc["rss_over_baseline_mb"] is None and doc["import_ms"] is None
    assert doc["notes"] == [f"import_ms, rss_over_baseline_mb not measured: {PAGE_UNMEASURED}"]
    assert result_problems(page_result(job, info, None, [], 5, "140.0.7339.16")) == []  # outputs only


# ---- every key read or written by name, on either side, is a declared field ----

def keys_used(path: Path, names: set[str], functions: set[str] | None = None, builder: str | None = None) -> set[str]:
    """The string keys ``path`` reads or writes on a dict named one of ``names`` (a variable, or an
    attribute such as ``result.document``): ``x["key"]``, ``x.get("key")``; and the keyword names of
    its calls of ``builder`` (``result_document``). Only inside ``functions`` when given."""
    tree = ast.parse(path.read_text())
    trees = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in functions] if functions \
        else [tree]

    def named(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in names) or (isinstance(node, ast.Attribute)
                                                                      and node.attr in names)
    keys = set()
    for node in (n for t in trees for n in ast.walk(t)):
        if isinstance(node, ast.Subscript) and named(node.value) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and named(node.func.value) and node.args and isinstance(node.args[0], ast.Constant)):
            keys.add(node.args[0].value)
        elif builder and isinstance(node, ast.Call) and builder in (getattr(node.func, "id", None),
                                                                      getattr(node.func, "attr", None)):
            keys |= {k.arg for k in node.keywords}
    return keys


def test_every_job_key_the_runner_reads_is_declared() -> None:
    read = keys_used(PACKAGE / "devices" / "runner.py", {"job"})
    assert {"runtime", "inputs", "input_names", "deadline_s", "result", "options", "iterations"} <= read  # found
    assert read <= set(JOB), f"runner.py reads job keys protocol.py does not declare: {sorted(read - set(JOB))}"
    for path in sorted(PACKAGE.glob("backends/*/device.py")):  # the backends' Runners (trtexec reads the job)
        read = keys_used(path, {"job"})
        assert read <= set(JOB), f"{path} reads job keys protocol.py does not declare: {sorted(read - set(JOB))}"
    assert {"options", "iterations"} <= keys_used(PACKAGE / "backends" / "tensorrt" / "device.py", {"job"})


@pytest.mark.parametrize(("path", "names", "functions", "some"), [
    ("devices/runner.py", {"result"}, None, {"ok", "load_ms", "timings_ms", "cpu", "error"}),
    ("backends/tensorrt/device.py", {"result"}, None, {"summary_ms", "timings_ms", "load_ms", "runtime_version"}),
    ("devices/base.py", {"doc"}, {"read_from", "checked_result"}, {"ok", "error", "not_for_this_cpu"}),
    ("devices/adb.py", {"doc"}, None, {"timings_ms", "summary_ms", "load_ms"}),
    ("devices/browser.py", {"doc"}, None, {"browser", "host", "load_ms"}),
    ("devices/qemu.py", {"document"}, None, {"cpu"}),
    ("pipeline/validate.py", {"doc"}, {"measure"}, {"runtime_version", "threads", "warmup", "iterations", "load_ms",
                                                    "peak_rss_mb", "cpu", "ray", "notes", "summary_ms", "timings_ms",
                                                    "other_cpu_load", "import_ms", "first_inference_ms",
                                                    "rss_over_baseline_mb"}),
    ("matrix/raydevice.py", {"document"}, None, {"ray"}),
])
def test_every_result_key_read_or_written_by_name_is_declared(path, names, functions, some) -> None:
    used = keys_used(PACKAGE / path, names, functions, builder="result_document")
    assert some <= used, f"the scan of {path} misses keys it uses: {sorted(some - used)}"
    assert used <= set(RESULT), f"{path} uses result keys protocol.py does not declare: {sorted(used - set(RESULT))}"


def test_protocol_fields_are_well_formed() -> None:
    kinds = {"string", "integer", "number", "boolean", "object", "null", "string[]", "number[]"}
    for fields, allowed in ((JOB, {ALWAYS, "optional"}), (RESULT, {ALWAYS, WHEN_OK, WHEN_FAILED, "optional"})):
        for name, field in fields.items():
            assert field.name == name and set(field.types) <= kinds and field.required in allowed and field.meaning
    assert JOB["protocol"].required == ALWAYS and RESULT["protocol"].required == ALWAYS
    assert sys.modules["edgeship.devices.protocol"].__doc__.startswith("edgeship device protocol")
