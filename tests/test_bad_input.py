"""Bad input, generated: every profile, model spec and devices file either loads or is refused with
its own error type (exit 2) naming the file; never another exception, never a traceback.

Documents start from a valid one and are mutated (a key set to a value of any TOML type, nan and
inf and huge numbers included, or deleted; unknown keys added), or are odd bytes: random, not
UTF-8, a byte order mark, UTF-16, empty, nested thousands deep, huge numbers. They go through the
real loaders and, a few, through the command line in this process.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeship.cli import main
from edgeship.config import StrictModel
from edgeship.devices.config import load_devices
from edgeship.errors import BadInputError, DeviceError, ModelSpecError, ProfileError
from edgeship.profile import load_profile
from edgeship.spec import load_spec

FAST = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CLI = settings(FAST, max_examples=30)

PROFILE: dict[str, Any] = {
    "name": "t", "description": "generated",
    "latency": {"warmup": 1, "iterations": 2, "threads": 1, "timeout_s": 60.0, "max_cv": 0.2, "cooldown_s": 0.0},
    "gates": {"min_sqnr_db": 20.0, "max_top1_drop": 1.0, "min_agreement": 0.9},
    "evaluation": {"samples": 4, "seed": 0}, "calibration": {"samples": 8, "seed": 1},
    "capture": {"methods": ["export", "trace"]},
    "selection": {"select": "fastest-within-budget", "max_top1_drop": 1.0},
    "variants": [{"name": "ort", "backend": "onnx", "options": {"opset": 17}, "gates": {"min_cosine": 0.9}},
                 {"name": "q", "backend": "onnx", "precision": "int8",
                  "quantization": {"scheme": "static", "method": "minmax", "percentile": 99.9},
                  "candidates": {"per_channel": [True, False]}},
                 {"name": "lite", "backend": "pytorch-mobile", "options": {"bytecode_version": 7}}],
    "bundle": {"platforms": ["android"], "variants": "passing"},
}
SPEC: dict[str, Any] = {
    "name": "m", "entry": "tinynet:build", "entry_kwargs": {"classes": 4, "scale": 0.5}, "weights": "w.pt",
    "inputs": [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}], "labels": "labels.txt",
    "data": {"calibration": "calib.npz", "evaluation": "mod:batches"},
    "preprocess": {"resize": [8, 8], "crop": [8, 8], "mean": [0.5], "std": [0.25], "layout": "NCHW"},
}
DEVICES: dict[str, Any] = {"devices": {
    "orin": {"transport": "ssh", "host": "h", "port": 22, "connect_timeout_s": 5.0, "retries": 1,
             "known_hosts": "kh", "workdir": "/tmp/e"},
    "pixel": {"transport": "adb", "serial": "X1", "programs": {"executorch": "/data/x"}, "backoff_s": 1.5},
    "me": {"transport": "local"},
}}


def _field_names() -> list[str]:
    """Every key any configuration model has: mutations hit real keys more often than random text would."""
    names: set[str] = set()
    todo = list(StrictModel.__subclasses__())
    while todo:
        model = todo.pop()
        todo.extend(model.__subclasses__())
        names.update(model.model_fields)
    return sorted(names)


KEYS = _field_names()
scalars = st.one_of(
    st.booleans(),
    st.integers(),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**30]),
    st.floats(),  # nan, inf and -inf included
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]),
    st.text(max_size=12),
    st.sampled_from(["onnx", "int8", "fp16", "static", "ssh", "adb", "local", "tinynet:build", "nan", "", "~x/y",
                     "a\x00b", "x" * 300]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4),
                      max_leaves=8)


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (tables inline)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(doc: dict[str, Any]) -> str:
    return "".join(f"{toml_value(str(k))} = {toml_value(v)}\n" for k, v in doc.items())


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> str:
    """``base`` with one to three keys set to any value, deleted or added, somewhere inside."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        node: Any = doc
        while True:
            items = node.items() if isinstance(node, dict) else enumerate(node)
            inner = [k for k, v in items if isinstance(v, (dict, list)) and v]
            if not inner or not draw(st.booleans()):
                break
            node = node[draw(st.sampled_from(inner))]
        if isinstance(node, list):
            node[draw(st.integers(0, len(node) - 1))] = draw(values)
            continue
        key = draw(st.sampled_from(sorted(node) or ["x"]) | st.sampled_from(KEYS) | st.text(max_size=6))
        if draw(st.integers(0, 4)) == 0:
            node.pop(key, None)
        else:
            node[key] = draw(values)
    return toml_document(doc)


def odd_bytes(base: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """Bytes a TOML reader must survive: random, invalid UTF-8 inside a valid file, a byte order
    mark, UTF-16, empty, nesting thousands deep, numbers beyond any float or 64-bit integer."""
    valid = toml_document(base).encode()
    deep = st.integers(30, 5000)
    return st.one_of(
        st.binary(max_size=300),
        st.tuples(st.integers(0, len(valid)), st.binary(min_size=1, max_size=8)).map(
            lambda cut: valid[:cut[0]] + cut[1] + valid[cut[0]:]),
        st.sampled_from([b"", b"\xef\xbb\xbf" + valid, valid.decode().encode("utf-16"), b"\xff\xfe\x00",
                         b"\xef\xbb\xbf", b"\x00" * 16, valid.replace(b"1", b"1" + b"0" * 400)]),
        deep.map(lambda n: b"a = " + b"[" * n + b"]" * n),
        deep.map(lambda n: b"a = " + b"{b = " * n + b"1" + b"}" * n),
        deep.map(lambda n: b"[" + b".".join([b"t"] * n) + b"]\n"),
        st.integers(300, 5000).map(lambda n: valid + b"x = 1e" + str(n).encode() + b"\ny = " + b"9" * n + b"\n"),
    )


def loads_or_is_refused(load: Any, path: Path, error: type[BadInputError]) -> None:
    """``load(path)`` returns, or raises ``error`` whose first line names the file and whose text
    is short; anything else (another exception type) fails the test."""
    try:
        load(path)
    except error as e:
        lines = str(e).splitlines()
        assert str(path) in lines[0]
        assert len(lines) <= 22 and len(str(e)) < 8000  # at most 20 problems and a count of the rest


def project(folder: Path) -> Path:
    """A folder with the files the base documents name (their content is never read by the loaders)."""
    folder.mkdir(exist_ok=True)
    for name in ("w.pt", "labels.txt", "calib.npz", "kh"):
        (folder / name).write_text("")
    return folder


def test_bad_input_base_documents_load(tmp_path: Path) -> None:
    folder = project(tmp_path / "p")
    for name, doc in (("p.toml", PROFILE), ("m.toml", SPEC), ("d.toml", DEVICES)):
        (folder / name).write_text(toml_document(doc))
    assert len(load_profile(folder / "p.toml").variants) == 4
    assert load_spec(folder / "m.toml").inputs[0].shape == [1, 3, 8, 8]
    assert load_devices(folder / "d.toml").names == ["host", "browser", "x86-avx2-emulated", "arm64-emulated",
                                                     "orin", "pixel", "me"]


KINDS = pytest.mark.parametrize(("base", "load", "error"), [(PROFILE, load_profile, ProfileError),
                                                            (SPEC, load_spec, ModelSpecError),
                                                            (DEVICES, load_devices, DeviceError)],
                                ids=["profile", "spec", "devices"])


@KINDS
@pytest.mark.parametrize("form", ["mutated", "odd-bytes"])
def test_bad_input_documents_load_or_are_refused(tmp_path: Path, base: dict[str, Any], load: Any,
                                                 error: type[BadInputError], form: str) -> None:
    documents = mutated(base).map(str.encode) if form == "mutated" else odd_bytes(base)

    @FAST
    @given(data=documents)
    def check(data: bytes) -> None:
        path = project(tmp_path / "p") / "f.toml"
        path.write_bytes(data)
        loads_or_is_refused(load, path, error)

    check()


def exits_2_naming(capsys: pytest.CaptureFixture[str], argv: list[str], *files: Path, may_load: bool = False) -> None:
    """The command exits 2 with one message naming one of ``files`` (or 0, with ``may_load``, where the
    input loads and nothing else in ``argv`` is refused)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code == 0 and may_load:
        return
    assert code == 2 and "edgeship: error: " in err, err
    first = err.split("edgeship: error: ", 1)[1].splitlines()[0]
    assert any(str(f) in first for f in files), err


@CLI
@given(text=mutated(PROFILE))
def test_bad_input_profile_on_the_command_line_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       text: str) -> None:
    folder = project(tmp_path / "p")
    (folder / "p.toml").write_text(text)
    spec = folder / "m.toml"  # refused too (its weights are missing): no build ever starts
    spec.write_text(toml_document({**SPEC, "weights": "missing.pt"}))
    exits_2_naming(capsys, ["build", "--target", str(folder / "p.toml"), "--model", str(spec), "--quiet",
                            "--out", str(tmp_path / "out")], folder / "p.toml", spec)


@CLI
@given(data=mutated(SPEC).map(str.encode) | odd_bytes(SPEC))
def test_bad_input_spec_on_the_command_line_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    data: bytes) -> None:
    folder = project(tmp_path / "p")
    (folder / "m.toml").write_bytes(data)
    # An unknown --device is refused after the spec loads: no build ever starts.
    exits_2_naming(capsys, ["build", "--target", "host", "--model", str(folder / "m.toml"), "--device", "nosuch",
                            "--out", str(tmp_path / "out")], folder / "m.toml", Path("--device nosuch"))


@CLI
@given(text=mutated(DEVICES))
def test_bad_input_devices_file_on_the_command_line_exits_0_or_2(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path, text: str) -> None:
    folder = project(tmp_path / "p")
    (folder / "d.toml").write_text(text)
    exits_2_naming(capsys, ["devices", "--devices", str(folder / "d.toml"), "list"], folder / "d.toml",
                   may_load=True)
