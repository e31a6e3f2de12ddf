"""make bench-cpu-kinds: every int8 path's accuracy on each x86 CPU kind, measured in one run.

Each int8 path edgeship builds (ONNX Runtime QDQ U8S8 and S8S8 with 8- and 7-bit weights, OpenVINO
by NNCF with each overflow_fix, PyTorch Mobile on the fbgemm, x86 and qnnpack engines, ExecuTorch's
XNNPACK int8) is built once with its setting pinned, then run by the real command on these devices,
and its SQNR against the float model read from results.json, device by device:

- ``host``: this machine's CPU, whatever it is (the table's header names it and its flags);
- ``x86-avx2-emulated``: qemu-x86_64 -cpu Haswell, AVX2 without VNNI or AVX-512, every runtime's
  own kernels for that CPU (emulated: outputs only);
- ``cap-vnni``, ``cap-avx512``, ``cap-avx2``: this machine's CPU with oneDNN's and FBGEMM's own
  dispatch capped (ONEDNN_MAX_CPU_ISA, FBGEMM_ENABLE_INSTRUCTIONS) at AVX-512 VNNI, AVX-512 without
  VNNI and AVX2. The cap reaches OpenVINO's CPU plugin (oneDNN) and PyTorch's quantized engines
  (FBGEMM and oneDNN) only; ONNX Runtime's MLAS and XNNPACK have no such switch, so their cells on
  a capped device are left out, not shown as that kind's figure.

Models: the demo (trained) and the zoo's resnet18 (seeded random weights, which overstate int8
error). Nothing is asserted; it writes benchmarks/results/cpu_kinds.json and prints the table.

    python benchmarks/cpu_kinds.py [--models digitnet,resnet18] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "cpu_kinds.json"
sys.path[:0] = [str(REPO)]

from edgeship.devices.cpu import cpu_facts  # noqa: E402

MODELS = {"digitnet": None, "resnet18": REPO / "examples" / "zoo" / "resnet18.toml"}
WEIGHTS = {"digitnet": "trained (scikit-learn digits)", "resnet18": "seeded random weights"}
EMULATED = "x86-avx2-emulated"
# Device -> (what it is, the environment of its Python).
CAPS = {
    "cap-vnni": ("AVX-512 VNNI, no AMX",
                 {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512_E1"}),
    "cap-avx512": ("AVX-512, no VNNI", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512"}),
    "cap-avx2": ("AVX2, no VNNI", {"ONEDNN_MAX_CPU_ISA": "AVX2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}),
}
CAPPED_RUNTIMES = ("openvino", "pytorch-mobile")  # the runtimes whose kernel dispatch the caps reach
STATIC = {"scheme": "static", "per_channel": True}
VARIANTS = [
    ("onnx", "ONNX Runtime U8S8, 8-bit weights", {"activations": "uint8", "reduce_range": False}, "minmax"),
    ("onnx", "ONNX Runtime U8S8, 7-bit weights (reduce_range)", {"activations": "uint8", "reduce_range": True},
     "minmax"),
    ("onnx", "ONNX Runtime S8S8, 8-bit weights", {"activations": "int8-symmetric", "reduce_range": False}, "minmax"),
    ("onnx", "ONNX Runtime S8S8, 7-bit weights", {"activations": "int8-symmetric", "reduce_range": True}, "minmax"),
    ("openvino", "OpenVINO NNCF, overflow_fix first_layer_only (NNCF's default)",
     {"overflow_fix": "first_layer_only", "fast_bias_correction": False}, "mean-minmax"),
    ("openvino", "OpenVINO NNCF, overflow_fix enable (7-bit weights)",
     {"overflow_fix": "enable", "fast_bias_correction": False}, "mean-minmax"),
    ("openvino", "OpenVINO NNCF, overflow_fix disable", {"overflow_fix": "disable", "fast_bias_correction": False},
     "mean-minmax"),
    ("pytorch-mobile", "PyTorch Mobile fbgemm (7-bit activations)", {"engine": "fbgemm"}, "histogram"),
    ("pytorch-mobile", "PyTorch Mobile x86 (7-bit activations)", {"engine": "x86"}, "histogram"),
    ("pytorch-mobile", "PyTorch Mobile qnnpack (8-bit activations)", {"engine": "qnnpack"}, "histogram"),
    ("executorch", "ExecuTorch XNNPACK QS8", {"partitioner": "xnnpack"}, "histogram"),
]


def toml(value: object) -> str:
    """A value as TOML, tables inline (benchmarks/runtime_profile.py writes its profile with it too)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml(v)}" for k, v in value.items()) + " }"  # type: ignore[union-attr]


def profile_text() -> str:
    lines = ['description = "every int8 path with its setting pinned (benchmarks/cpu_kinds.py)"',
             "[capture]", 'methods = ["export", "trace", "script"]',
             "[latency]", "warmup = 1", "iterations = 3",
             "[gates]", "min_sqnr_db = 20.0"]
    for i, (backend, _, options, method) in enumerate(VARIANTS):
        lines += ["[[variants]]", f'name = "{variant_name(i)}"', f'backend = "{backend}"', 'precision = "int8"',
                  f"options = {toml(options)}", f"quantization = {toml({**STATIC, 'method': method})}"]
    return "\n".join(lines) + "\n"


def variant_name(i: int) -> str:
    return f"v{i:02d}-{VARIANTS[i][0]}"


def devices_file(folder: Path) -> Path:
    """The capped devices: this machine's Python, started with the dispatch caps in its environment."""
    text = ""
    for name, (_, env) in CAPS.items():
        wrapper = folder / f"python-{name}"
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        wrapper.write_text(f"#!/bin/sh\nexec env {exports} {sys.executable} \"$@\"\n")
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
        text += f'[devices.{name}]\ntransport = "local"\npython = "{wrapper}"\n'
    path = folder / "devices.toml"
    path.write_text(text)
    return path


def build(model: str, folder: Path) -> dict:
    """The audit profile built for ``model`` and run on every device; its results.json."""
    (folder / "profile.toml").write_text(profile_text())
    devices = ["host", EMULATED, *CAPS]
    command = [sys.executable, "-m", "edgeship", "build", "--target", str(folder / "profile.toml"),
               "--out", str(folder / "out"), "--devices", str(devices_file(folder)), "--quiet"]
    command += (["--model", str(MODELS[model])] if MODELS[model] else [])
    for device in devices:
        command += ["--device", device]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if proc.returncode not in (0, 3):  # 3: some variant failed a gate on some device, which is the point
        raise SystemExit(f"{model}: edgeship build exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    results = json.loads((folder / "out" / "results.json").read_text())
    results["seconds"] = round(time.perf_counter() - started, 1)
    return results


def cells(results: dict) -> list[dict]:
    """One row per int8 path: its SQNR on each device (None where not measured or not applicable)."""
    rows = []
    built = {v["name"]: v for v in results["variants"]}
    for i, (backend, label, options, _) in enumerate(VARIANTS):
        variant = built[variant_name(i)]
        by_device = {lat["device"]: lat for lat in variant["latency"]}
        row = {"path": label, "backend": backend, "options": options, "error": variant.get("error")}
        for device in ["host", EMULATED, *CAPS]:
            lat = by_device.get(device)
            applies = device not in CAPS or backend in CAPPED_RUNTIMES
            acc = (lat or {}).get("accuracy") or {}
            row[device] = round(acc["sqnr_db"], 2) if applies and acc.get("sqnr_db") is not None else None
        rows.append(row)
    return rows


def table(model: str, rows: list[dict], host: dict) -> str:
    flags = [f for f in host.get("flags", []) if "vnni" in f or f.startswith(("amx", "avx512f", "avx2"))]
    head = [f"host: {host.get('model')} ({', '.join(flags)})", f"{EMULATED} (emulated)",
            *[f"{name}: {what}" for name, (what, _) in CAPS.items()]]
    out = [f"\n{model} ({WEIGHTS[model]}): SQNR dB against the float model", "",
           "| int8 path | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for row in rows:
        values = [("-" if row[d] is None else f"{row[d]:.1f}") for d in ["host", EMULATED, *CAPS]]
        out.append(f"| {row['path']} | " + " | ".join(values) + " |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    host = cpu_facts()
    doc = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": host,
           "caps": {name: {"is": what, "env": env} for name, (what, env) in CAPS.items()},
           "capped_runtimes": list(CAPPED_RUNTIMES), "models": {}}
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix=f"edgeship-cpu-kinds-{model}-") as folder:
            print(f"{model}: building {len(VARIANTS)} int8 variants, measuring on {2 + len(CAPS)} devices ...",
                  flush=True)
            results = build(model, Path(folder))
        rows = cells(results)
        doc["models"][model] = {"weights": WEIGHTS[model], "seconds": results["seconds"], "rows": rows,
                                "samples": results["variants"][0]["accuracy"]["samples"]}
        print(table(model, rows, host), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
