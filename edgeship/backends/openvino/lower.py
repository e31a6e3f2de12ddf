"""OpenVINO: the captured program converted by ``openvino.convert_model`` and saved as IR, a folder
``model.openvino/`` holding ``model.xml`` (the graph) and ``model.bin`` (the weights); the
artifact's sha256 covers both (``devices/hashing.py``).

- Conversion reads the ``export`` capture (an ExportedProgram) or the TorchScript of a trace or
  script capture; with ``options.convert_from = "auto"`` a failed conversion falls back to the ONNX
  the onnx backend writes, and ``lowering.details.converted_from`` says which was used.
- Inputs carry the spec's names and shapes (a dynamic dimension bounded min..max), outputs the float
  model's flattened names (``edgeship.outputs``), so the IR is fed and read like every artifact.
- Precision ``fp32`` keeps f32 weights, ``fp16`` compresses them to f16 (``compress_to_fp16``; the CPU
  plugin computes in f32), ``bf16`` keeps f32 weights computed in bf16, ``int8`` is NNCF's
  post-training quantization (backends/openvino/quantize.py). What each computes in is written into the IR's
  runtime info (``edgeship/inference_precision``) and set as the plugin's INFERENCE_PRECISION_HINT
  by the runner, which refuses a CPU whose plugin would compute otherwise: left alone, the plugin runs
  an fp32 model in bf16 on CPUs with AVX512-BF16 or AMX.
- A ``bf16`` IR runs only on a CPU with AVX512-BF16 or AMX: lowering names the target CPUs without
  them, it is not measured on this machine when this CPU has neither (``unavailable_here``: the
  row says why, as for any artifact that cannot run here), and the runner refuses it on such a
  device.
"""
from __future__ import annotations

import contextlib
import io
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgeship.backends.base import Artifact, Backend, LowerRequest, require
from edgeship.backends.onnx.lower import export_onnx, onnx_output_names
from edgeship.backends.openvino.bundle import runtime_needs
from edgeship.backends.openvino.cpu import BF16_FLAGS, lacking_bf16
from edgeship.backends.openvino.spec import OpenvinoSpec
from edgeship.backends.spec import TargetCpu
from edgeship.errors import LoweringError, first_line
from edgeship.fsutil import atomic_output
from edgeship.lowering.capture import Captured, check_sizes
from edgeship.quantize.cpu_choice import cpu_details, this_machine
from edgeship.results import VariantResult

if TYPE_CHECKING:
    import openvino

    from edgeship.spec import ModelSpec

XML, BIN = "model.xml", "model.bin"
RT_KEY = ["edgeship", "inference_precision"]  # where the IR records what it computes in
GENERATED_NAME = re.compile(r"[A-Za-z]+_\d+")  # a node name the converter numbered


class OpenvinoBackend(OpenvinoSpec, Backend):
    """Converts with ``openvino.convert_model`` (ONNX as the fallback), saves IR; int8 by NNCF."""

    def bundle_metadata(self, row: VariantResult, options: OpenvinoSpec.Options,  # type: ignore[override]
                        toolchain: dict[str, str]) -> dict[str, Any]:
        return runtime_needs(row, options, toolchain)

    def available(self, options: OpenvinoSpec.Options | None = None) -> str | None:  # type: ignore[override]
        try:
            require("openvino", self.name)
        except LoweringError as e:
            return str(e)
        return None

    def job_options(self, options: OpenvinoSpec.Options,  # type: ignore[override]
                    precision: str = "fp32", spec: ModelSpec | None = None) -> dict[str, Any]:
        # No inference precision: the runner takes the one the IR records it was validated with.
        return {"performance_hint": options.performance_hint}

    def lower(self, request: LowerRequest) -> Artifact:
        ov = require("openvino", self.name)
        precision, opts = request.variant.precision, cast(OpenvinoSpec.Options, request.options)
        compute = inference_precision(precision, opts)
        notes: list[str] = []
        details: dict[str, Any] = {"openvino": ov.__version__, "inference_precision": compute}
        if compute == "bf16":
            notes.append(check_bf16_cpus(request.cpus))
            details["cpus"] = cpu_details(this_machine() if request.cpus is None else request.cpus)
        with tempfile.TemporaryDirectory(prefix="edgeship-ov-") as work:
            model, source = convert(request.captured, opts, Path(work), notes)
            details["converted_from"] = source
            name_and_shape(model, request.captured)
            if precision == "int8":
                from edgeship.backends.openvino.quantize import quantize_nncf

                model, quantized = quantize_nncf(model, request)
                stable_names(model, request.captured.model.spec.name)  # and the nodes NNCF made
                notes += quantized.notes
                details["quantization"] = quantized.details
            model.set_rt_info(compute, RT_KEY)
            with atomic_output(request.dest) as tmp:
                tmp.mkdir()
                ov.save_model(model, str(tmp / XML), compress_to_fp16=precision == "fp16")
        details.update(ir_details(request.dest))
        if precision == "fp16":
            notes.append("weights stored as f16 (compress_to_fp16); the CPU plugin computes in f32")
        if request.captured.dynamic and self.unavailable_here(opts, precision) is None:
            notes.append(check_sizes(request.captured, self.load(request.dest, opts, threads=1), precision))
        return Artifact(request.dest, notes, details)

    def unavailable_here(self, options: OpenvinoSpec.Options, precision: str) -> str | None:  # type: ignore[override]
        reason = self.available(options)
        if reason is None and inference_precision(precision, options) == "bf16" and lacking_bf16(this_machine()):
            model = this_machine()[0][1].get("model") or "model unknown"
            return (f"this CPU ({model}) has no bf16 instructions ({' or '.join(BF16_FLAGS)}): OpenVINO would "
                    "compute this bf16 IR in f32")
        return reason


def inference_precision(precision: str, options: OpenvinoSpec.Options | None) -> str:
    """What the CPU plugin computes a variant of this precision in (INFERENCE_PRECISION_HINT)."""
    return OpenvinoSpec.computes_in(precision, {"inference_precision": getattr(options, "inference_precision", None)})


def check_bf16_cpus(cpus: list[TargetCpu] | None) -> str:
    """A note on which target CPUs can compute the bf16 IR: those with bf16 instructions, those
    without (the IR is not measured there: the runner refuses it, and on this machine the row says
    why) and those whose flags are unknown (the runner checks there)."""
    cpus = this_machine() if cpus is None else cpus
    lacking = set(lacking_bf16(cpus))
    unknown = [name for name, facts in cpus if not (facts or {}).get("flags")]
    able = [name for name, _ in cpus if name not in unknown and name not in lacking]
    note = f"bf16 ({' or '.join(BF16_FLAGS)}): {', '.join(able) or 'no target CPU'} can compute it"
    if lacking:
        named = [f"{name} ({(facts or {}).get('model') or 'model unknown'})" for name, facts in cpus if name in lacking]
        note += (f"; {', '.join(named)} cannot (no bf16 instructions: OpenVINO would compute in f32 there, so it "
                 "is not measured there; build openvino fp32 or int8 for such a CPU)")
    return note + (f"; flags of {', '.join(unknown)} unknown: the runner checks there" if unknown else "")


def convert(captured: Captured, opts: OpenvinoSpec.Options, work: Path, notes: list[str]) -> tuple[openvino.Model, str]:
    """The ov.Model converted from the capture, or from ONNX (``options.convert_from``), and which."""
    import openvino as ov

    first = {"export": "export", "trace": "torchscript", "script": "torchscript"}[captured.method]
    if opts.convert_from != "onnx":
        try:
            with quiet():
                if captured.method == "export":
                    return ov.convert_model(captured.program), first
                return ov.convert_model(captured.program, example_input=captured.example_inputs), first
        except Exception as e:  # the converter names the operator it has no translation for
            if opts.convert_from != "auto":
                raise LoweringError(f"openvino.convert_model could not convert the {captured.method} capture: "
                                    f"{type(e).__name__}: {first_line(e)}") from None
            notes.append(f"openvino.convert_model failed on the {captured.method} capture ({type(e).__name__}: "
                         f"{first_line(e)}); converted from ONNX instead")
    onnx_path = work / "model.onnx"
    export_onnx(captured, opts.opset, False, onnx_path)
    with quiet():
        return ov.convert_model(str(onnx_path)), "onnx"


def name_and_shape(model: openvino.Model, captured: Captured) -> None:
    """Give the IR's inputs the spec's names and shapes (a dynamic dimension bounded min..max) and
    its outputs the float model's flattened names; LoweringError when the counts differ."""
    import openvino as ov

    spec = captured.model.spec
    names = onnx_output_names(captured)
    if len(model.inputs) != len(spec.inputs) or len(model.outputs) != len(names):
        raise LoweringError(f"the converted model has {len(model.inputs)} inputs and {len(model.outputs)} outputs; "
                            f"the model spec has {len(spec.inputs)} inputs and the float model {len(names)} outputs")
    new_shapes = {}
    for port, inp in zip(model.inputs, spec.inputs):
        port.get_tensor().set_names({inp.name})
        dims = [ov.Dimension(d) for d in inp.shape]
        for key, dim in inp.dynamic.items():
            dims[int(key)] = ov.Dimension(dim.min, dim.max)
        new_shapes[port] = ov.PartialShape(dims)
    model.reshape(new_shapes)
    for port, name in zip(model.outputs, names):
        port.get_tensor().set_names({name})
    stable_names(model, spec.name)


def stable_names(model: openvino.Model, name: str) -> None:
    """Names that come out the same in every process: the converter numbers the model and the nodes
    it makes up (``Model3``, ``Multiply_72630``) from counters of the whole process, so the same
    program converts to different IR text (and stage-cache and calibration-cache keys) after other
    conversions. The model takes the spec's name, such a node its type and place in the graph."""
    model.set_friendly_name(name)
    taken = {op.get_friendly_name() for op in model.get_ordered_ops()}
    for index, op in enumerate(model.get_ordered_ops()):
        if GENERATED_NAME.fullmatch(op.get_friendly_name()):
            new = f"{op.get_type_name()}_{index}"
            if new not in taken:
                taken.add(new)
                op.set_friendly_name(new)


def ir_details(folder: Path) -> dict[str, Any]:
    """Inputs, outputs and operator counts of a saved IR, read back from disk."""
    import openvino as ov

    model = ov.Core().read_model(str(Path(folder) / XML))
    ops: dict[str, int] = {}
    for op in model.get_ordered_ops():
        ops[op.get_type_name()] = ops.get(op.get_type_name(), 0) + 1
    weights = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant" and len(op.shape) > 1:
            dtype = op.get_element_type().get_type_name()
            weights[dtype] = weights.get(dtype, 0) + 1

    def signature(ports: Sequence[openvino.Output]) -> list[dict[str, Any]]:
        return [{"name": p.get_any_name(), "shape": str(p.get_partial_shape()),
                 "dtype": p.get_element_type().get_type_name()} for p in ports]

    return {"inputs": signature(model.inputs), "outputs": signature(model.outputs),
            "operators": dict(sorted(ops.items())), "weight_constants": dict(sorted(weights.items())),
            "files": {XML: (Path(folder) / XML).stat().st_size, BIN: (Path(folder) / BIN).stat().st_size}}


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The converter's own prints kept off edgeship's progress display."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield

