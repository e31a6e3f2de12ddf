"""The openvino backend's declaration (OpenVINO): name, suffix, runtime, capture methods, precisions,
its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from edgeship.backends.spec import BackendSpec, TargetCpu, Variant
from edgeship.config import StrictModel
from edgeship.quantize.settings import QuantizationSupport

OPENVINO_QUANTIZATION = QuantizationSupport(
    schemes=("static",), methods=("mean-minmax", "minmax", "histogram"), default_method="mean-minmax",
    engines="NNCF post-training quantization for OpenVINO")

# What the OpenVINO CPU plugin computes each precision's artifact in (INFERENCE_PRECISION_HINT). It
# is set for every precision: left alone, the plugin runs an fp32 model in bf16 on a CPU with
# AVX512-BF16 or AMX (resnet18: 47.6 dB against eager instead of 126 dB, measured here).
OPENVINO_INFERENCE_PRECISION = {"fp32": "f32", "bf16": "bf16", "fp16": "f32", "int8": "f32"}
NNCF_PRESETS = Literal["performance", "mixed"]
NNCF_OVERFLOW_FIX = Literal["enable", "first_layer_only", "disable"]  # nncf OverflowFix values


class OpenvinoSpec(BackendSpec):
    """OpenVINO: an IR folder (``model.xml`` + ``model.bin``) run by the OpenVINO runtime's CPU plugin."""

    name = "openvino"
    suffix = ".openvino"
    runtime = "openvino"
    toolchain = ("openvino", "nncf")
    extra = "openvino"
    requires = ("openvino", "nncf", "onnx", "onnxscript")  # onnx: convert_from = "onnx" and auto's fallback
    device_modules = ("device",)
    capture_methods = ("export", "trace", "script")
    bundle_platforms = ("x86",)
    # run_openvino.py (numpy and openvino) and edgeship_openvino (main.cpp, ov::Core, and its CMake
    # project, built against the OpenVINO runtime's C++ package): both compile an IR in the precision
    # its runtime info records and refuse to run when the CPU plugin compiles for another.
    bundle_programs = {"x86": {"python/run_openvino.py": "app/run_openvino.py", "cpp/main.cpp": "app/main.cpp",
                               "cpp/CMakeLists.txt": "app/CMakeLists.txt"}}
    precisions = ("fp32", "bf16", "fp16", "int8")
    quantization = OPENVINO_QUANTIZATION
    dynamic_shapes = None  # bounded dimensions (min..max) in the IR's input shapes

    class Options(StrictModel):
        """Options of the openvino backend."""

        convert_from: Literal["auto", "export", "onnx"] = Field(
            "auto", description="What openvino.convert_model reads: the captured program (export, or the "
                                "TorchScript of a trace or script capture), the ONNX the onnx backend writes, or "
                                "auto: the captured program, then ONNX when that conversion fails (recorded).")
        opset: int = Field(20, ge=18, le=21, description="ONNX opset when converting from ONNX.")
        performance_hint: Literal["LATENCY", "THROUGHPUT"] = Field(
            "LATENCY", description="The CPU plugin's PERFORMANCE_HINT when the artifact is compiled and run.")
        inference_precision: Literal["f32", "bf16"] | None = Field(
            None, description="int8 only: what the layers NNCF leaves in float compute in; unset: f32 (bf16 "
                              "needs AVX512-BF16 or AMX on every target CPU). fp32, bf16 and fp16 compute in "
                              "f32, bf16 and f32.")
        preset: NNCF_PRESETS = Field(  # type: ignore[valid-type]
            "performance", description="int8: NNCF's preset, performance (symmetric activations and weights) or "
                                       "mixed (asymmetric activations: for ReLU-free models, e.g. transformers).")
        model_type: Literal["transformer"] | None = Field(
            None, description="int8: NNCF's model_type; transformer keeps softmax, layer norm and the "
                              "attention's inputs in float as NNCF recommends for transformers. Unset: "
                              "transformer where the variant's quantization.operators resolves to weighted "
                              "layers only (by default: a graph with attention and layer normalization).")
        smooth_quant: bool = Field(
            False, description="int8 with model_type transformer: NNCF's SmoothQuant (activation outliers moved "
                               "into the weights). Off by default: on all-MiniLM-L6-v2 it read mean cosine "
                               "0.68 against float where the same scheme without it read 0.95.")
        fast_bias_correction: bool = Field(
            True, description="int8: NNCF's fast bias correction (false: the full algorithm, slower to build; on a "
                              "graph NNCF refuses it for, such as one with an If, fast is used, then none, and "
                              "the notes say so).")
        subset_size: int | None = Field(
            None, ge=1, le=1_000_000,
            description="int8: calibration samples NNCF collects statistics on; unset: every sample of the variant's "
                        "calibration data ([calibration] samples).")
        target_device: Literal["ANY", "CPU"] = Field(
            "ANY", description="int8: NNCF's target_device (which layers get quantizers); ANY is NNCF's default.")
        overflow_fix: NNCF_OVERFLOW_FIX | None = Field(  # type: ignore[valid-type]
            None, description="int8: NNCF's overflow_fix. enable: 7-bit weights in every layer, so the CPU "
                              "plugin's u8 x s8 pair sums cannot saturate int16 on CPUs without VNNI; "
                              "first_layer_only (NNCF's default): in the first layer only; disable. Unset: "
                              "chosen from the target CPUs: enable when one lacks VNNI and AMX or is not known, "
                              "else first_layer_only.")

    @classmethod
    def computes_in(cls, precision: str, options: dict[str, Any]) -> str:
        """What the CPU plugin computes a variant in (its INFERENCE_PRECISION_HINT): f32 or bf16."""
        if precision == "int8" and options.get("inference_precision"):
            return str(options["inference_precision"])
        return OPENVINO_INFERENCE_PRECISION[precision]

    @classmethod
    def reads_cpus(cls, variant: Variant) -> bool:
        """A variant computed in bf16 (its notes name the target CPUs without bf16 instructions), or int8
        with overflow_fix left unset (its quantization picks overflow_fix by the target CPUs)."""
        return cls.computes_in(variant.precision, variant.options) == "bf16" or cls._chooses_overflow_fix(variant)

    @classmethod
    def cpu_dependence(cls, variant: Variant, cpus: list[TargetCpu]) -> dict[str, Any] | None:
        """The target devices lacking bf16 (a bf16 variant's notes name them) and the overflow_fix chosen
        on ``cpus`` and why (int8 with overflow_fix unset; set in the profile, it is in the key already)."""
        from edgeship.backends.openvino.cpu import choose_overflow_fix, lacking_bf16

        found: dict[str, Any] = {}
        if cls.computes_in(variant.precision, variant.options) == "bf16":
            found["openvino_bf16"] = {"lacking_bf16": lacking_bf16(cpus)}
        if cls._chooses_overflow_fix(variant):
            value, why = choose_overflow_fix(None, cpus)
            found["overflow_fix"] = {"value": value, "why": why}
        return found or None

    @classmethod
    def _chooses_overflow_fix(cls, variant: Variant) -> bool:
        return variant.precision == "int8" and cls.parse_options(variant.options).overflow_fix is None

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        if options.get("inference_precision") is not None and precision != "int8":
            return [f'options.inference_precision is for int8 variants; precision "{precision}" computes in '
                    f'{OPENVINO_INFERENCE_PRECISION[precision]}']
        return []
