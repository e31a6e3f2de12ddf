"""The backend registry: what each backend is, apart from how it lowers.

A declaration (a ``BackendSpec`` subclass) names the backend, its file suffix, the runtime the
device runner uses for it, the capture methods it lowers from, its precisions, its own int8
quantizer (``QuantizationSupport``) and its ``Options`` model. Declaring the class registers it in
``SPECS`` (``__init_subclass__``). The profile loader and the quantizers ask this module only; the
implementations (``lowering/<backend>.py``) subclass these declarations and are collected in
``lowering/backends.py``. Nothing here imports an SDK, the pipeline or the profile.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from edgeship.config import StrictModel, check
from edgeship.errors import ProfileError
from edgeship.quantize.settings import QuantizationSupport

SPECS: dict[str, type[BackendSpec]] = {}


class BackendSpec:
    """A backend's declaration: name, suffix, runtime, capture methods, precisions, options."""

    name: ClassVar[str]
    suffix: ClassVar[str]
    runtime: ClassVar[str]                      # runner runtime id
    capture_methods: ClassVar[tuple[str, ...]]  # the capture methods it can lower from
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    # Its own int8 quantizer (schemes and methods a variant's [quantization] may name), or None.
    quantization: ClassVar[QuantizationSupport | None] = None
    # Whether its artifacts take a model spec's dynamic dimensions (every size from min to max):
    # None when they do, else why not. Precision- or option-specific refusals: dynamic_shape_problems.
    dynamic_shapes: ClassVar[str | None] = "this backend does not declare whether it takes dynamic dimensions"

    class Options(StrictModel):
        """No options."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:  # a declaration; implementations inherit their name
            if cls.name in SPECS:
                raise RuntimeError(f"backend {cls.name!r} declared twice")
            SPECS[cls.name] = cls

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[str]:
        return check(options, cls.Options)[1]

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        """Combinations of precision and options this backend cannot build (checked at plan time)."""
        return []

    @classmethod
    def dynamic_shape_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        """Why a variant with this precision and these options cannot take a spec's dynamic
        dimensions (checked at plan time when the spec has some; empty when it can)."""
        return [cls.dynamic_shapes] if cls.dynamic_shapes else []

    @classmethod
    def parse_options(cls, options: dict[str, Any]) -> Any:
        parsed, problems = check(options, cls.Options)
        if problems:
            raise ProfileError("; ".join(problems))
        return parsed


# The int8 quantizers each backend runs (quantize/<backend>.py implements them).
MOBILE_QUANTIZATION = QuantizationSupport(
    schemes=("static", "dynamic"), methods=("histogram", "minmax"), default_method="histogram",
    engines="PyTorch quantization (FX graph mode, dynamic)")
EXECUTORCH_QUANTIZATION = QuantizationSupport(
    schemes=("static", "dynamic"), methods=("histogram", "minmax"), default_method="histogram",
    engines="PT2E with the XNNPACK quantizer")
ONNX_QUANTIZATION = QuantizationSupport(
    schemes=("static", "dynamic"), methods=("minmax", "percentile", "entropy"), default_method="minmax",
    engines="ONNX Runtime quantization")
OPENVINO_QUANTIZATION = QuantizationSupport(
    schemes=("static",), methods=("mean-minmax", "minmax", "histogram"), default_method="mean-minmax",
    engines="NNCF post-training quantization for OpenVINO")
TENSORRT_QUANTIZATION = QuantizationSupport(
    schemes=("static",), methods=("minmax", "percentile", "entropy"), default_method="minmax",
    engines="TensorRT explicit quantization (ONNX Runtime QDQ, S8S8)")

COREML_DEPLOYMENT_TARGETS = ("iOS16", "iOS17", "iOS18", "macOS13", "macOS14", "macOS15")
COMPUTE_UNITS = Literal["ALL", "CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE"]
# Highest ONNX opset each TensorRT release's parser takes (onnx-tensorrt docs/operators.md).
TENSORRT_MAX_OPSET = {"8.5": 17, "8.6": 17, "10.3": 20, "10.7": 20}


class PytorchMobileSpec(BackendSpec):
    """PyTorch Mobile: frozen TorchScript for the lite interpreter (``.ptl``)."""

    name = "pytorch-mobile"
    suffix = ".ptl"
    runtime = "pytorch-mobile"
    capture_methods = ("trace", "script")
    precisions = ("fp32", "int8")
    quantization = MOBILE_QUANTIZATION
    dynamic_shapes = None  # TorchScript keeps sizes symbolic where the code does; lowering runs min, opt and max

    class Options(StrictModel):
        """Options of the pytorch-mobile backend."""

        bytecode_version: int | None = Field(
            None, ge=3, description="Bytecode version the app's lite runtime reads; the artifact is backported to it.")
        optimize: bool = Field(True, description="Run optimize_for_mobile where this torch build supports it.")
        engine: Literal["qnnpack", "x86", "fbgemm"] = Field(
            "qnnpack", description="Quantized engine int8 variants are built for and run with: qnnpack (ARM "
                                   "phones), x86 or fbgemm.")


class ExecutorchSpec(BackendSpec):
    """ExecuTorch: a ``.pte`` program delegated to XNNPACK, to Core ML, or portable operators only."""

    name = "executorch"
    suffix = ".pte"
    runtime = "executorch"
    capture_methods = ("export",)
    precisions = ("fp32", "fp16", "int8")
    quantization = EXECUTORCH_QUANTIZATION
    dynamic_shapes = None  # upper-bounded: memory is planned for the max sizes

    class Options(StrictModel):
        """Options of the executorch backend."""

        partitioner: Literal["xnnpack", "coreml", "portable"] = Field(
            "xnnpack", description="xnnpack delegates what XNNPACK runs; coreml delegates to Core ML (Apple "
                                   "devices; fp16 or fp32); portable keeps ExecuTorch's portable operators.")
        minimum_deployment_target: Literal[COREML_DEPLOYMENT_TARGETS] = Field(  # type: ignore[valid-type]
            "iOS16", description="With partitioner coreml: the oldest OS the delegated program runs on.")
        compute_units: COMPUTE_UNITS = Field(  # type: ignore[valid-type]
            "ALL", description="With partitioner coreml: compute units Core ML may use.")

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        partitioner = options.get("partitioner", "xnnpack")
        if precision == "fp16" and partitioner != "coreml":
            return ['precision "fp16" needs options.partitioner = "coreml" (XNNPACK and portable run fp32 or int8)']
        if precision == "int8" and partitioner == "coreml":
            return ['precision "int8" quantizes for XNNPACK (PT2E); with partitioner "coreml" use fp16 or fp32']
        return []


class OnnxSpec(BackendSpec):
    """ONNX: an ``.onnx`` model run by ONNX Runtime."""

    name = "onnx"
    suffix = ".onnx"
    runtime = "onnxruntime"
    capture_methods = ("export", "trace", "script")
    precisions = ("fp32", "int8")
    quantization = ONNX_QUANTIZATION
    dynamic_shapes = None  # free dimensions named by the spec's groups

    class Options(StrictModel):
        """Options of the onnx backend."""

        opset: int = Field(20, ge=7, le=23, description="ONNX opset; below 18 needs a trace or script capture.")
        dynamic_batch: bool = Field(True, description="Leave the batch dimension free (named 'batch').")
        graph_optimization: Literal["disabled", "basic", "extended", "all"] = Field(
            "all", description="ONNX Runtime graph optimization level when the artifact is run.")
        activations: Literal["uint8", "int8-symmetric"] = Field(
            "uint8", description="int8 static: uint8 activations (U8S8, fast on CPUs) or symmetric int8 (S8S8, "
                                 "TensorRT's form).")
        reduce_range: bool | None = Field(
            None, description="int8 static: 7-bit weights; unset: chosen from the target CPUs, on when one is x86 "
                              "without VNNI (its kernels saturate otherwise) or unknown, off when all have VNNI or "
                              "are ARM.")


# fp16 in onnxruntime-web's wasm backend, measured in Chromium (make bench-web-settings, resnet18, 2
# threads, docs/ARCHITECTURE.md "Browser"): no faster than fp32, and below the fp32 gate.
WEB_FP16_REFUSAL = ("precision \"fp16\" is refused for onnx-web: measured in Chromium, onnxruntime-web's wasm "
                    "backend ran resnet18 in fp16 no faster than in fp32 (96.4 vs 92.4 ms, 0.97x [0.87, 1.00]) at "
                    "57.0 dB, below the 60 dB fp32 gate; its only gain was half the file, and web-int8 is a quarter "
                    "of it and 1.8x faster (28.3 dB): ship web-fp32 or web-int8")


class OnnxWebSpec(BackendSpec):
    """onnxruntime-web: an ``.onnx`` for the browser's WebAssembly backend, run in Chromium."""

    name = "onnx-web"
    suffix = ".onnx"
    runtime = "onnxruntime-web"
    capture_methods = ("export", "trace", "script")
    precisions = ("fp32", "fp16", "int8")
    quantization = ONNX_QUANTIZATION
    dynamic_shapes = None  # the same free dimensions as the onnx backend; wasm sessions take any size

    class Options(OnnxSpec.Options):
        """Options of the onnx-web backend: the onnx backend's, with the browser's defaults."""

        opset: int = Field(20, ge=7, le=21, description="ONNX opset (onnxruntime-web 1.30 runs opsets 7-21).")
        dynamic_batch: bool = Field(False, description="Leave the batch dimension free (named 'batch').")
        reduce_range: bool = Field(
            False, description="int8 static: 7-bit weights. Off: the wasm SIMD int8 kernels widen to 16 bits "
                               "before they add, so 8-bit weights do not saturate there.")

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        return [WEB_FP16_REFUSAL] if precision == "fp16" else []


# int8 for AOTInductor, tried on this torch (2.14.1, torchao 0.18; docs/ARCHITECTURE.md "LibTorch").
AOTI_INT8_REFUSAL = (
    "precision \"int8\" is refused for aoti: PT2E with torchao's X86InductorQuantizer does not lower to int8 "
    "kernels through AOTInductor on this torch. Tried on resnet18: the quantizer stops on torchvision's blocks "
    "(\"Input partition has more than one output node\": a ReLU module called twice); with that worked around, "
    "the .pt2 holds 20 float convolution calls and no oneDNN qconv (the int8 weights are dequantized to fp32 "
    "at run time, pytorch/ao#4566), 30.1 ms against fp32's 30.9 ms; lowering with lower_pt2e_quantized_to_x86 "
    "first leaves oneDNN-packed weights torch.export cannot trace (as_strided). Ship aoti-fp32, or int8 with "
    "onnx or executorch")
# How far a package's code may go past the baseline x86-64 instruction set: -march and Inductor's
# vector ISA (what each level needs of the CPU it runs on is in lowering/aoti.py).
AOTI_ISAS = ("auto", "native", "avx512", "avx2", "generic")


class AotiSpec(BackendSpec):
    """AOTInductor: a ``.pt2`` package of compiled kernels and weights for LibTorch C++ (and Python)."""

    name = "aoti"
    suffix = ".pt2"
    runtime = "aoti"
    capture_methods = ("export",)
    precisions = ("fp32", "int8")
    dynamic_shapes = None  # torch.export's ranges are compiled in; lowering runs min, opt and max

    class Options(StrictModel):
        """Options of the aoti backend."""

        isa: Literal[AOTI_ISAS] = Field(  # type: ignore[valid-type]
            "auto", description="Instruction set the package is compiled for: native (-march=native, every "
                                "extension of the build CPU), avx512 (x86-64-v4), avx2 (x86-64-v3), generic "
                                "(x86-64-v2, scalar loops); auto: native when every target CPU has all of the "
                                "build CPU's extensions, else the best level all of them have; compiled on the "
                                "device (compile_on), auto is native there.")
        freezing: bool = Field(True, description="Fold weights into the graph as constants (batch norm into "
                                                 "convolutions, prepacked oneDNN weights).")
        threads: int | None = Field(
            None, ge=1, description="Threads Inductor's own loops are compiled for; unset: the thread count "
                                    "the runtime sets (omp_get_max_threads, the job's threads).")
        max_autotune: bool = Field(False, description="Let Inductor benchmark kernel choices while compiling "
                                                      "(slower builds).")
        compile_on: Literal["auto", "build", "device"] = Field(
            "auto", description="Where the package is compiled: build (this machine), device (the artifact is the "
                                "exported program, compiled by each device for its own CPU at its first run and "
                                "kept beside it; needs torch and g++ there; that first run's compile counts against "
                                "[latency] timeout_s, so raise it for a slow board); auto: device when a target "
                                "device is another architecture than this machine (AOTInductor does not "
                                "cross-compile), else build.")

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        return [AOTI_INT8_REFUSAL] if precision == "int8" else []


class TorchscriptSpec(BackendSpec):
    """TorchScript for full LibTorch: a ``.pt`` loaded by ``torch::jit::load`` (not the lite interpreter)."""

    name = "torchscript"
    suffix = ".pt"
    runtime = "torchscript"
    capture_methods = ("trace", "script")
    precisions = ("fp32",)
    dynamic_shapes = None  # TorchScript keeps sizes symbolic where the code does; lowering runs min, opt and max

    class Options(StrictModel):
        """Options of the torchscript backend."""

        freeze: bool = Field(True, description="torch.jit.freeze: weights inlined as constants, batch norm "
                                               "folded into convolutions.")
        optimize_for_inference: bool = Field(
            False, description="torch.jit.optimize_for_inference after freezing (oneDNN layouts on x86; the "
                               "artifact then needs a LibTorch built with oneDNN).")


# What the OpenVINO CPU plugin computes each precision's artifact in (INFERENCE_PRECISION_HINT). It
# is set for every precision: left alone, the plugin runs an fp32 model in bf16 on a CPU with
# AVX512-BF16 or AMX (resnet18: 47.6 dB against eager instead of 126 dB, measured here).
OPENVINO_INFERENCE_PRECISION = {"fp32": "f32", "bf16": "bf16", "fp16": "f32", "int8": "f32"}
# The CPU flags (Linux's names) the plugin computes bf16 with: without one it has no bf16 kernels.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
NNCF_PRESETS = Literal["performance", "mixed"]
NNCF_OVERFLOW_FIX = Literal["enable", "first_layer_only", "disable"]  # nncf OverflowFix values


class OpenvinoSpec(BackendSpec):
    """OpenVINO: an IR folder (``model.xml`` + ``model.bin``) run by the OpenVINO runtime's CPU plugin."""

    name = "openvino"
    suffix = ".openvino"
    runtime = "openvino"
    capture_methods = ("export", "trace", "script")
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
            None, ge=1, description="int8: calibration samples NNCF collects statistics on; unset: every sample "
                                    "of the variant's calibration data ([calibration] samples).")
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
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        if options.get("inference_precision") is not None and precision != "int8":
            return [f'options.inference_precision is for int8 variants; precision "{precision}" computes in '
                    f'{OPENVINO_INFERENCE_PRECISION[precision]}']
        return []


class TensorrtSpec(BackendSpec):
    """TensorRT: the ONNX model an engine is built from on the device, and the builder settings."""

    name = "tensorrt"
    suffix = ".onnx"
    runtime = "tensorrt"
    capture_methods = ("export", "trace", "script")
    precisions = ("fp32", "fp16", "int8")
    quantization = TENSORRT_QUANTIZATION
    dynamic_shapes = None  # one optimization profile: min, opt and max shapes

    @classmethod
    def dynamic_shape_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        if options.get("dla_core") is not None:
            return ["options.dla_core with dynamic dimensions: the DLA takes no dynamic dimensions (TensorRT "
                    "needs min = opt = max for it); leave dla_core unset to build for the GPU"]
        return []

    class Options(StrictModel):
        """Options of the tensorrt backend (settings the device-side builder applies)."""

        tensorrt_version: Literal[tuple(TENSORRT_MAX_OPSET)] = Field(  # type: ignore[valid-type]
            "10.3", description="TensorRT on the device: 8.5 (JetPack 5.1), 8.6 (JetPack 6.0), 10.3 (JetPack "
                                "6.1/6.2), 10.7.")
        opset: int | None = Field(
            None, ge=9, description="ONNX opset; unset: the highest this TensorRT parses, at most 18 (17 needs a "
                                    "trace capture).")
        simplify: bool = Field(True, description="Simplify the graph with onnxslim (constant folding, dead nodes).")
        workspace_mb: int = Field(2048, ge=16, description="Builder workspace memory pool limit, MiB.")
        builder_optimization_level: int | None = Field(
            None, ge=0, le=5, description="TensorRT 8.6+: 0-5; unset: TensorRT's default (3).")
        timing_cache: bool = Field(
            True, description="Keep a timing cache beside the engine so rebuilds on the device are quick.")
        dla_core: int | None = Field(
            None, ge=0, description="Build for this DLA core (Jetson Orin/Xavier); unset: the GPU.")
        gpu_fallback: bool = Field(True, description="With dla_core: let layers DLA cannot run fall back to the GPU.")

        @model_validator(mode="after")
        def _fits_version(self) -> TensorrtSpec.Options:
            top = TENSORRT_MAX_OPSET[self.tensorrt_version]
            if self.opset is not None and self.opset > top:
                raise ValueError(f"opset {self.opset}: TensorRT {self.tensorrt_version} parses opsets 9-{top}")
            version = tuple(map(int, self.tensorrt_version.split(".")))
            if self.builder_optimization_level is not None and version < (8, 6):
                raise ValueError(f"builder_optimization_level needs TensorRT 8.6 or later, not {self.tensorrt_version}")
            return self

        def chosen_opset(self) -> int:
            return self.opset if self.opset is not None else min(TENSORRT_MAX_OPSET[self.tensorrt_version], 18)


class CoremlSpec(BackendSpec):
    """Core ML: an ``.mlpackage`` ML program for iOS and macOS."""

    name = "coreml"
    suffix = ".mlpackage"
    runtime = "coreml"
    capture_methods = ("export", "trace")
    precisions = ("fp16", "fp32", "w8", "int8")
    dynamic_shapes = None  # ct.RangeDim per dynamic dimension

    class Options(StrictModel):
        """Options of the coreml backend."""

        minimum_deployment_target: Literal[COREML_DEPLOYMENT_TARGETS] = Field(  # type: ignore[valid-type]
            "iOS16", description="Oldest OS the package must run on (ML programs need iOS 16 / macOS 13 or later "
                                 "here).")
        compute_units: COMPUTE_UNITS = Field(  # type: ignore[valid-type]
            "ALL", description="Compute units Core ML may use when the package is loaded and timed.")
        weight_mode: Literal["linear_symmetric", "linear"] = Field(
            "linear_symmetric", description="int8 weight quantization mode (w8 and int8 precisions).")
