"""What a user would reach for instead of edgeship, each in its plain, documented default form.

``make_*`` run in the benchmark's process and write the peer's artifact; ``load_*`` run in a
timing worker (benchmarks/harness.py) and return a callable on a list of numpy arrays; each names
the modules it imports first (``imports``), so the worker times the runtime's import apart from the
load, as edgeship's runners do.

fp32: a plain ``torch.onnx.export`` in an ONNX Runtime default session, ExecuTorch's documented
XNNPACK flow, ``torch.compile``. int8: each runtime's own quantizer called with its defaults on
the same calibration samples edgeship's int8 variants use: ONNX Runtime's ``quantize_static``
(QDQ, int8 activations and weights, per-tensor, min-max: its signature's defaults) on the plain
export, and ExecuTorch's PT2E flow with ``XNNPACKQuantizer().set_global(
get_symmetric_quantization_config())`` (per-tensor, static), lowered to XNNPACK.

OpenVINO, at its documented defaults: ``openvino.convert_model`` on ``torch.export.export``, saved
by ``openvino.save_model`` with its defaults, read back and compiled by ``core.compile_model(model,
"CPU")`` with no configuration (the plugin's default precision, hint and threads, as the bench gives
every runtime its own default thread count); int8, ``nncf.quantize`` with every NNCF default on the
same calibration samples. The precision the plugin actually compiled for is read back
(``INFERENCE_PRECISION_HINT``): on a CPU with AVX512-BF16 or AMX it is bf16, not f32, and the peer
is compared as what it computed in (benchmarks/candidates.py).
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from harness import imports


def make_ort_default(module: Any, example: tuple[Any, ...], folder: Path) -> Path:
    """A plain ``torch.onnx.export`` (its defaults), as a user would first try."""
    import torch

    path = folder / "peer-ort-default.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(module, example, str(path))
    return path


def size_of(path: Path) -> int:
    """The model file plus its external-data file, where the exporter wrote one (an OpenVINO IR's
    model.bin beside its model.xml)."""
    return sum(part.stat().st_size for part in parts_of(path))


def parts_of(path: Path) -> list[Path]:
    """The files a peer's model is: the file, and its external data (``.onnx.data``, an IR's ``.bin``)."""
    extra = [path.with_name(path.name + ".data"), path.with_suffix(".bin") if path.suffix == ".xml" else None]
    return [path, *[p for p in extra if p is not None and p.exists()]]


@imports("onnxruntime")
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


OV_XML = "model.xml"
OV_PRECISION = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}   # the plugin's element types, as the bench names them


def make_openvino_default(module: Any, example: tuple[Any, ...], folder: Path) -> Path:
    """OpenVINO's documented PyTorch path: ``openvino.convert_model(torch.export.export(module,
    example))`` and ``openvino.save_model(model, path)`` with its defaults, so with
    ``compress_to_fp16=True`` (weights stored as f16; the documented default save path, which a user
    takes unless told otherwise; the plugin decompresses them when it compiles). Returns the IR's
    model.xml (model.bin beside it)."""
    import openvino as ov
    import torch

    with contextlib.redirect_stdout(io.StringIO()):
        model = ov.convert_model(torch.export.export(module, example))
    path = folder / "peer-openvino-default" / OV_XML
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(path))
    return path


def make_nncf_int8_default(module: Any, example: tuple[Any, ...], calibration: list[list[Any]],
                           folder: Path) -> Path:
    """NNCF's documented post-training quantization of an OpenVINO model with every default
    (``nncf.quantize(model, nncf.Dataset(samples))``: preset performance, target device ANY,
    fast_bias_correction=True, subset_size 300, so every calibration sample here), on the model
    convert_model makes of torch.export.export, calibrated on ``calibration`` (one list of input
    arrays per sample, batch 1); saved with ``openvino.save_model``'s defaults."""
    import openvino as ov
    import torch

    from edgeship.backends.openvino.quantize import import_nncf, quiet_nncf

    nncf = import_nncf()
    with contextlib.redirect_stdout(io.StringIO()):
        model = ov.convert_model(torch.export.export(module, example))
    with quiet_nncf():  # its progress bars only; the call is nncf.quantize's defaults
        quantized = nncf.quantize(model, nncf.Dataset([tuple(sample) for sample in calibration]))
    path = folder / "peer-nncf-int8-default" / OV_XML
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(quantized, str(path))
    return path


class OpenVinoDefault:
    """An IR compiled by ``core.compile_model(model, "CPU")`` (only ``threads``, when the bench sets
    one, as ``INFERENCE_NUM_THREADS``), called on a list of arrays; ``precision`` and ``threads``
    say what the plugin compiled for (its INFERENCE_PRECISION_HINT and INFERENCE_NUM_THREADS)."""

    def __init__(self, path: str, threads: int | None = None) -> None:
        import openvino as ov

        core = ov.Core()
        config = {"INFERENCE_NUM_THREADS": int(threads)} if threads else {}
        compiled = core.compile_model(core.read_model(path), "CPU", config)
        self.request = compiled.create_infer_request()
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")
        element = str(getattr(hint, "get_type_name", lambda: hint)())
        self.precision = OV_PRECISION.get(element, element)
        self.threads = int(compiled.get_property("INFERENCE_NUM_THREADS"))
        self.hint = str(compiled.get_property("PERFORMANCE_HINT"))

    def __call__(self, arrays: list) -> list:
        return list(self.request.infer(list(arrays)).to_tuple())


@imports("openvino")
def load_openvino_default(path: str) -> Any:
    """The IR at the CPU plugin's defaults (``OpenVinoDefault``)."""
    return OpenVinoDefault(path)


@imports("torch", "executorch.runtime")
def load_executorch_default(path: str) -> Any:
    """The runtime's documented load_program / load_method / execute."""
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")
    return lambda arrays: method.execute([torch.from_numpy(a) for a in arrays])


@imports("torch", "edgeship.model")
def load_torch_compile(spec: dict, base_dir: str) -> Any:
    """``torch.compile`` (inductor on the CPU) with its defaults; compiled on the first call (so its
    first inference is the compile: here from inductor's on-disk cache, which the accuracy run in
    the bench's own process has filled)."""
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
