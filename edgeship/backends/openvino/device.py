"""OpenVINO's runner: an IR compiled for the CPU plugin, in the precision it was validated in.

Device-side: shipped beside runner.py as openvino_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.openvino.device.
"""
import importlib
import os

import numpy as np

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


OV_PRECISIONS = {"f32": "f32", "float32": "f32", "bf16": "bf16", "bfloat16": "bf16", "f16": "f16",
                 "float16": "f16"}
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # cpu.py's, repeated: this file imports nothing of edgeship


class OpenvinoRunner(runner.Runner):
    """An OpenVINO IR folder (model.xml + model.bin) compiled for the CPU plugin; options:
    inference_precision (f32|bf16; unset: what the IR's rt_info edgeship/inference_precision says),
    performance_hint (LATENCY|THROUGHPUT). The plugin is told the precision and the threads, and
    what it compiled with is read back: a run whose plugin computes in another precision than the
    one asked is refused, not timed under the wrong name (on CPUs with AVX512-BF16 or AMX the plugin
    runs f32 models in bf16 unless told otherwise)."""

    runtime = "openvino"
    imports = ("openvino",)

    def load(self):
        import openvino as ov

        core = ov.Core()
        xml = os.path.join(self.path, "model.xml") if os.path.isdir(self.path) else self.path
        model = core.read_model(xml)
        want = self.options.get("inference_precision") or _ov_rt_precision(model)
        facts = runner.cpu_facts()
        if want == "bf16" and facts and facts.get("flags") and not any(f in facts["flags"] for f in BF16_FLAGS):
            raise runner.NotForThisCpu("this IR is validated in bf16 and this CPU (%s) has no bf16 instructions (%s): "
                                "OpenVINO would compute it in f32; build openvino fp32 or int8 for this device"
                                % (facts.get("model") or "model unknown", " or ".join(BF16_FLAGS)))
        config = {"PERFORMANCE_HINT": self.options.get("performance_hint", "LATENCY")}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = int(self.threads)
        if want:
            config["INFERENCE_PRECISION_HINT"] = want
        self._compiled = core.compile_model(model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        used = _ov_precision(self._compiled.get_property("INFERENCE_PRECISION_HINT"))
        if want and used != want:
            raise RuntimeError("asked OpenVINO's CPU plugin for %s inference and it compiled for %s" % (want, used))
        self._threads = int(self._compiled.get_property("INFERENCE_NUM_THREADS"))
        self.version = "openvino %s CPU (%s, %s)" % (ov.__version__.split("-")[0], _x86_isa(facts), used)
        self.notes = ["OpenVINO CPU plugin: inference precision %s%s, %s hint, %d threads"
                      % (used, "" if want else " (the plugin's default: none was asked)",
                         config["PERFORMANCE_HINT"], self._threads)]

    def infer(self, arrays):
        return [np.asarray(a) for a in self._request.infer(list(arrays)).to_tuple()]

    def threads_in_use(self):
        return self._threads


def _ov_rt_precision(model):
    """The compute precision the IR records it was validated with (edgeship's rt_info), or None."""
    key = ["edgeship", "inference_precision"]
    return model.get_rt_info(key).astype(str) if model.has_rt_info(key) else None


def _ov_precision(value):
    """An INFERENCE_PRECISION_HINT property value (an element type) as f32 / bf16 / f16."""
    text = str(getattr(value, "get_type_name", lambda: value)()).lower()
    text = text.replace("<type: '", "").replace("'>", "")
    return OV_PRECISIONS.get(text, text)


def _x86_isa(facts):
    """The widest x86 extension set the CPU plugin's kernels use on this CPU, for the runtime label."""
    flags = (facts or {}).get("flags") or []
    for flag, name in (("amx_tile", "AMX"), ("avx512_vnni", "AVX-512 VNNI"), ("avx512f", "AVX-512"),
                       ("avx_vnni", "AVX2 VNNI"), ("avx2", "AVX2"), ("sse4_2", "SSE4.2")):
        if flag in flags:
            return name
    return (facts or {}).get("arch") or "ISA unknown"
