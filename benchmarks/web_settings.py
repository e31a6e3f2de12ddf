"""Which int8 form the web profile ships, and whether fp16 earns a place: measured in Chromium.

For each model (the demo and resnet18 by default) it builds, with the real command and a profile
of its own, web-fp32 and int8 in four forms (activations uint8 / int8-symmetric, i.e. U8S8 / S8S8,
by per-channel / per-tensor weights), each measured in Chromium by the build (accuracy on the
evaluation data), plus an fp16 form of web-fp32 (onnxruntime's float16 converter, inputs and
outputs kept float32, its accuracy measured in Chromium here). Then every one is timed in its own
page, interleaved in rounds at the same thread count, and the table prints p50, size and accuracy
with each form's ratio to web-fp32. It writes benchmarks/results/web_settings.json.

    python benchmarks/web_settings.py [--models digitnet,resnet18] [--threads 2] [--rounds 7]
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from bench import MODELS, WORK, build, ensure_data  # noqa: E402
from harness import Timing  # noqa: E402
from stats import ratio  # noqa: E402

from web import peer_accuracy_in_chromium  # noqa: E402

RESULT = HERE / "results" / "web_settings.json"
FORMS = {"u8s8-per-channel": ("uint8", True), "u8s8-per-tensor": ("uint8", False),
         "s8s8-per-channel": ("int8-symmetric", True), "s8s8-per-tensor": ("int8-symmetric", False)}


def profile_text() -> str:
    """targets/web.toml's settings with every int8 form as its own variant."""
    variants = ['[[variants]]\nname = "web-fp32"\nbackend = "onnx-web"\nprecision = "fp32"\n']
    for name, (activations, per_channel) in FORMS.items():
        variants.append(textwrap.dedent(f"""\
            [[variants]]
            name = "web-int8-{name}"
            backend = "onnx-web"
            precision = "int8"
            options = {{ activations = "{activations}" }}
            quantization = {{ scheme = "static", method = "minmax", per_channel = {str(per_channel).lower()} }}
            gates = {{ max_top1_drop = 1.0, min_sqnr_db = 20.0 }}
            """))
    head = textwrap.dedent("""\
        name = "web-settings"
        devices = ["browser"]
        [latency]
        warmup = 5
        iterations = 20
        [gates]
        min_sqnr_db = 60.0
        max_top1_drop = 0.5
        """)
    return head + "\n".join(variants)


def fp16_of(fp32: Path, dest: Path) -> Path:
    """web-fp32 with float16 weights and compute, float32 inputs and outputs (onnxruntime's converter)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(dest))
    return dest


def measure(name: str, args: argparse.Namespace) -> dict:
    from edgeship.model import example_inputs
    from edgeship.results import Results
    from edgeship.spec import load_spec

    spec_path = MODELS[name]
    ensure_data(spec_path)
    spec = load_spec(spec_path)
    folder = WORK / f"web-settings-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    profile = folder / "web-settings.toml"
    profile.write_text(profile_text())
    seconds, out = build(spec_path, str(profile), folder)
    print(f"{name}: built and measured in Chromium in {seconds:.0f} s", flush=True)
    results = Results.read(out / "results.json")
    rows = {}
    for row in results.variants[1:]:
        rows[row.name] = {"path": str(out / row.file), "size_bytes": row.size_bytes,
                          "sqnr_db": row.accuracy.sqnr_db if row.accuracy else None,
                          "top1_drop": row.accuracy.top1_drop if row.accuracy else None,
                          "gates_passed": row.gates.passed, "notes": row.notes[:3]}
    fp16 = fp16_of(Path(rows["web-fp32"]["path"]), folder / "web-fp16.onnx")
    rows["web-fp16"] = {"path": str(fp16), "size_bytes": fp16.stat().st_size,
                        **peer_accuracy_in_chromium(spec, fp16, folder)}
    inputs = folder / "inputs.npz"
    names = [i.name for i in spec.inputs]
    arrays = [t.numpy() for t in example_inputs(spec)]
    np.savez(inputs, **dict(zip(names, arrays)))
    jobs = {n: ("web:open_page", (r["path"], str(inputs), names, args.threads, {"graph_optimization": "all"}))
            for n, r in rows.items()}
    timing = Timing(jobs, arrays, 1)
    try:
        timing.run(args.rounds, 15)
        for n, r in rows.items():
            r["p50_ms"] = timing.p50(n)
            r["failed"] = timing.failed.get(n)
            r["vs_web_fp32"] = (ratio(*timing.paired("web-fp32", n)).as_dict()
                                if n != "web-fp32" and n in timing.names and "web-fp32" in timing.names else None)
    finally:
        timing.close()
    return {"threads": args.threads, "rounds": args.rounds, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digitnet,resnet18")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from edgeship.cli import quiet_libraries

    quiet_libraries()
    started = time.perf_counter()
    report = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "models": {}}
    for name in args.models.split(","):
        report["models"][name] = m = measure(name, args)
        print(f"{name} at {args.threads} threads (ratio = web-fp32 time / this form's time, [95% interval]):")
        for n, r in sorted(m["rows"].items(), key=lambda kv: kv[1]["p50_ms"] or 1e9):
            vs = r["vs_web_fp32"]
            text = f"{vs['value']:.2f} [{vs['low']:.2f}, {vs['high']:.2f}]" if vs else "-"
            acc = f"SQNR {r['sqnr_db']:.1f} dB" if r.get("sqnr_db") is not None else ""
            drop = f", top-1 drop {r['top1_drop']:.2f}" if r.get("top1_drop") is not None else ""
            p50 = f"{r['p50_ms']:.3f} ms" if r["p50_ms"] else f"failed: {r['failed']}"
            print(f"  {n:24s} {p50:>12s}  {r['size_bytes'] / 1024:8.1f} KiB  {acc}{drop}  vs web-fp32 {text}")
    report["seconds"] = round(time.perf_counter() - started, 1)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULT.relative_to(HERE.parent)} in {report['seconds']:.0f} s")


if __name__ == "__main__":
    main()
