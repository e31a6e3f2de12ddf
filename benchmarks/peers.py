"""What a user would reach for instead of edgeship, each in its plain, documented default form.

``make_*`` run in the benchmark's process and write the peer's artifact; ``load_*`` run in a
timing worker (benchmarks/harness.py) and return a callable on a list of numpy arrays.

fp32: a plain ``torch.onnx.export`` in an ONNX Runtime default session, ExecuTorch's documented
XNNPACK flow, ``torch.compile``. int8: each runtime's own quantizer called with its defaults on
the same calibration samples edgeship's int8 variants use: ONNX Runtime's ``quantize_static``
(QDQ, int8 activations and weights, per-tensor, min-max: its signature's defaults) on the plain
export, and ExecuTorch's PT2E flow with ``XNNPACKQuantizer().set_global(
get_symmetric_quantization_config())`` (per-tensor, static), lowered to XNNPACK.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any


def make_ort_default(module: Any, example: tuple[Any, ...], folder: Path) -> Path:
    """A plain ``torch.onnx.export`` (its defaults), as a user would first try."""
    import torch

    path = folder / "peer-ort-default.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(module, example, str(path))
    return path


def size_of(path: Path) -> int:
    """The model file plus its external-data file, where the exporter wrote one."""
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


def load_ort_default(path: str) -> Any:
    """An ONNX Runtime session with default options."""
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda arrays: session.run(None, dict(zip(names, arrays)))


def make_executorch_default(module: Any, example: tuple[Any, ...], folder: Path) -> Path:
    """ExecuTorch's documented XNNPACK flow: torch.export, to_edge_transform_and_lower with the
    XNNPACK partitioner, to_executorch."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program = to_edge_transform_and_lower(torch.export.export(module, example),
                                          partitioner=[XnnpackPartitioner()]).to_executorch()
    path = folder / "peer-executorch-default.pte"
    path.write_bytes(program.buffer)
    return path


def make_ort_int8_default(fp32_onnx: Path, calibration: list[list[Any]], folder: Path) -> Path:
    """``onnxruntime.quantization.quantize_static`` with its defaults on the plain export,
    calibrated on ``calibration`` (one list of input arrays per sample, batch 1)."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    names = [i.name for i in ort.InferenceSession(str(fp32_onnx), providers=["CPUExecutionProvider"]).get_inputs()]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter(calibration)

        def get_next(self) -> dict[str, Any] | None:
            sample = next(self.samples, None)
            return None if sample is None else dict(zip(names, sample))

    path = folder / "peer-ort-int8-default.onnx"
    quantize_static(str(fp32_onnx), str(path), Reader())
    return path


def make_executorch_int8_default(module: Any, example: tuple[Any, ...], calibration: list[list[Any]],
                                 folder: Path) -> Path:
    """ExecuTorch's documented XNNPACK int8 flow: torch.export, prepare_pt2e with the XNNPACK
    quantizer's default symmetric config, calibration, convert_pt2e, export, lower, to_executorch."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(torch.export.export(module, example).module(), quantizer)
    with torch.no_grad():
        for sample in calibration:
            prepared(*[torch.from_numpy(a) for a in sample])
    program = torch.export.export(convert_pt2e(prepared), example)
    path = folder / "peer-executorch-int8-default.pte"
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    return path


def load_executorch_default(path: str) -> Any:
    """The runtime's documented load_program / load_method / execute."""
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")
    return lambda arrays: method.execute([torch.from_numpy(a) for a in arrays])


def load_torch_compile(spec: dict, base_dir: str) -> Any:
    """``torch.compile`` (inductor on the CPU) with its defaults; compiled on the first call."""
    import torch

    from edgeship.model import load_model
    from edgeship.spec import ModelSpec

    model_spec = ModelSpec.model_validate(spec)
    model_spec.base_dir = Path(base_dir)
    compiled = torch.compile(load_model(model_spec).module)

    def run(arrays: list) -> Any:
        with torch.inference_mode():
            return compiled(*[torch.from_numpy(a) for a in arrays])
    return run
