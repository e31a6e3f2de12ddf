"""Why web-fp32 is slower than native ONNX Runtime on this machine: the same work at three sizes,
each in onnxruntime-web (Chromium, wasm) and in native ONNX Runtime, at the same threads, in one
run of interleaved rounds (benchmarks/harness.py).

1. ``square``: one 1024 x 1024 x 1024 fp32 MatMul, the GEMM kernel's own speed (GFLOP/s): the
   wasm build's 128-bit SIMD kernels against the native build's (AVX2 / AVX-512 here).
2. ``convs``: every Conv2d of resnet18 at its own shapes and weights, each fed its own input, and
   nothing else (no batch norm, ReLU, pooling or adds): the convolution work alone. Native ONNX
   Runtime also runs it with the NCHWc layout transformer switched off (``disabled_optimizers``),
   the x86-only rewrite to blocked layouts that the wasm build does not have.
3. ``resnet18``: the whole model, a plain ``torch.onnx.export`` (the same file in both runtimes).

Each runtime runs its default session (onnxruntime-web: only the thread count set; native: the
edgeship runner's loader). The web/native time ratio of each row says where the gap comes from: if
the convolutions alone are already more than 2.5x slower in wasm, no graph edgeship can emit brings
the whole model under 2.5x.

    python benchmarks/web_ceiling.py [--rounds 7] [--threads 1,2]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# onnx's own IR version (14) is newer than onnxruntime-web 1.30 reads
from edgeship.backends.onnx_web.lower import WEB_MAX_IR_VERSION  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

RESULT = HERE / "results" / "web_ceiling.json"
SQUARE = 1024


def save_model(graph, path: Path) -> None:
    """The graph as an opset-17 model at an IR version onnxruntime-web reads."""
    from onnx import helper, save

    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=WEB_MAX_IR_VERSION),
         str(path))


def square_model(folder: Path) -> tuple[Path, dict[str, np.ndarray], float]:
    """One n x n x n fp32 MatMul with a constant right side; its inputs and FLOPs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    b = numpy_helper.from_array(rng.random((SQUARE, SQUARE), dtype=np.float32), "B")
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "square",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, SQUARE, SQUARE])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, SQUARE, SQUARE])], [b])
    path = folder / "square.onnx"
    save_model(graph, path)
    return path, {"A": rng.random((1, SQUARE, SQUARE), dtype=np.float32)}, 2.0 * SQUARE ** 3


def convs_model(folder: Path) -> tuple[Path, dict[str, np.ndarray], float]:
    """Every Conv2d of the bench resnet18 (its seeded weights), each on its own input of the shape
    it sees in the model at batch 1; its inputs and FLOPs (multiply-adds x 2)."""
    import models.zoo as zoo
    import torch
    from onnx import TensorProto, helper, numpy_helper

    model = zoo.resnet18()
    seen: list[tuple[str, torch.nn.Conv2d, tuple, tuple]] = []
    names = {m: n for n, m in model.named_modules()}
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append((names[m], m, tuple(i[0].shape), tuple(o.shape))))
             for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(torch.rand(1, 3, 224, 224))
    for h in hooks:
        h.remove()
    nodes, inputs, outputs, weights, arrays, flops = [], [], [], [], {}, 0.0
    rng = np.random.default_rng(0)
    for i, (name, conv, shape_in, shape_out) in enumerate(seen):
        x, w, y = f"x{i}", f"w{i}", f"y{i}"
        weights.append(numpy_helper.from_array(conv.weight.detach().numpy(), w))
        nodes.append(helper.make_node("Conv", [x, w], [y], name=name, strides=list(conv.stride),
                                      pads=[*conv.padding, *conv.padding], dilations=list(conv.dilation),
                                      group=conv.groups, kernel_shape=list(conv.kernel_size)))
        inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, list(shape_in)))
        outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, list(shape_out)))
        arrays[x] = rng.random(shape_in, dtype=np.float32)
        k = conv.in_channels // conv.groups * conv.kernel_size[0] * conv.kernel_size[1]
        flops += 2.0 * k * int(np.prod(shape_out))
    graph = helper.make_graph(nodes, "resnet18_convs", inputs, outputs, weights)
    path = folder / "convs.onnx"
    save_model(graph, path)
    return path, arrays, flops


def resnet18_model(folder: Path) -> tuple[Path, dict[str, np.ndarray], float]:
    """The bench resnet18, a plain torch.onnx.export (make bench's native ORT peer file)."""
    import models.zoo as zoo
    import torch
    from peers import make_ort_default

    from web import onnx_input_names

    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    path = make_ort_default(zoo.resnet18(), (x,), folder)
    return path, {onnx_input_names(path)[0]: x.numpy()}, 2 * 1.814e9


def load_native(path: str, names: list[str], threads: int, disabled: list[str]):
    """Native ONNX Runtime's default session at ``threads`` (the runner's settings) with the named
    graph optimizers switched off; a callable on the list of inputs in ``names`` order."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
    return lambda arrays: session.run(None, dict(zip(names, arrays)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    from harness import Timing
    from stats import ratio

    from edgeship.cli import quiet_libraries
    from edgeship.webfiles import ort_web_problem, ort_web_version

    quiet_libraries()
    if problem := ort_web_problem():
        sys.exit(f"not measured here: {problem}")
    folder = Path(tempfile.mkdtemp(prefix="edgeship-web-ceiling-"))
    threads = [int(t) for t in args.threads.split(",")]
    results: dict = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "onnxruntime_web": ort_web_version(), "rounds": args.rounds, "rows": {}}
    for label, make in (("square", square_model), ("convs", convs_model), ("resnet18", resnet18_model)):
        path, arrays, flops = make(folder)
        names = list(arrays)
        npz = folder / f"{label}-inputs.npz"
        np.savez(npz, **arrays)
        jobs = {}
        for t in threads:
            jobs[f"web @{t}"] = ("web:open_page", (str(path), str(npz), names, t, {}))
            jobs[f"native @{t}"] = ("web_ceiling:load_native", (str(path), names, t, []))
            if label != "square":
                no_nchwc = (str(path), names, t, ["NchwcTransformer"])
                jobs[f"native, no NCHWc @{t}"] = ("web_ceiling:load_native", no_nchwc)
        print(f"{label}: {flops / 1e9:.2f} GFLOP, timing {len(jobs)} jobs in {args.rounds} rounds", flush=True)
        timing = Timing(jobs, list(arrays.values()))
        try:
            timing.run(args.rounds, 10)
        finally:
            timing.close()
        row: dict = {"gflop": flops / 1e9, "failed": timing.failed, "jobs": {}}
        for name in timing.names:
            p50 = timing.p50(name)
            row["jobs"][name] = {"p50_ms": p50, "gflops": flops / (p50 / 1e3) / 1e9}
        for t in threads:
            if f"web @{t}" in timing.names and f"native @{t}" in timing.names:
                # web time / native time: how many times slower the browser is (the figure asks <= 2.5)
                r = ratio(*timing.paired(f"web @{t}", f"native @{t}")).as_dict()
                row[f"web_slower_than_native @{t}"] = r
            if f"native, no NCHWc @{t}" in timing.names:
                row[f"nchwc_speedup @{t}"] = ratio(*timing.paired(f"native, no NCHWc @{t}", f"native @{t}")).as_dict()
        results["rows"][label] = row
        for name, job in row["jobs"].items():
            print(f"  {name:<22} {job['p50_ms']:9.3f} ms  {job['gflops']:6.1f} GFLOP/s", flush=True)
        for t in threads:
            if (r := row.get(f"web_slower_than_native @{t}")) is not None:
                print(f"  {t} thread(s): web time / native time {r['value']:.2f} "
                      f"[{r['low']:.2f}, {r['high']:.2f}]", flush=True)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULT.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
