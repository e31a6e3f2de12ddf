"""ONNX Runtime's ``reduce_range`` for static int8, chosen from the target CPUs when the profile
leaves it unset.

Why it depends on the CPU (ONNX Runtime's documentation, docs/performance/model-optimizations/
quantization.md, "Data type selection" and the FAQ "When to use reduce-range"): on x86-64 with AVX2
or AVX-512, ONNX Runtime runs U8S8 (uint8 activations, int8 weights) with VPMADDUBSW, which adds
each pair of u8 x s8 products into a saturating int16, so full 8-bit weights can clip; reduce_range
(7-bit weights) "is designed for the U8S8 format on AVX2 and AVX512 (non-VNNI) machines to mitigate
saturation issues. This is not needed on machines supporting VNNI", and "there is no such issue on
other CPU architectures (x64 with VNNI and ARM)". VNNI (avx512_vnni, or avx_vnni) fuses the products
into int32 (MLAS's VNNI kernels use VPDPBUSD). 8-bit weights are better by up to about 6 dB of SQNR
(one bit; 2.4 dB on the demo model below, 1.1 dB on the demo and 3.1 dB on a random-weight resnet18
in make bench-cpu-kinds on an AMX CPU), so they are used wherever every target CPU takes them,
and 7 bits wherever one might not.

S8S8 (int8-symmetric activations) follows the same rule, although the documentation ties
reduce_range to U8S8 only: in ONNX Runtime's source, on x86 at graph optimization "extended" or "all"
(the default), the CPU provider's QDQS8ToU8Transformer turns int8 activation Q/DQ pairs into uint8
while Conv/MatMul/Gemm weights stay int8 (QDQIsInt8Allowed() is true only on ARM), so an S8S8 model
runs on the same U8S8 kernels. Measured on this project's AVX2 machine without VNNI (the demo model,
ONNX Runtime 1.32): S8S8 with 8-bit weights reads 26.8 dB unfused and 20.6 dB at "all", with 7-bit
weights 25.4 dB at both; U8S8 reads 30.0 / 14.6 dB with 8-bit weights and 27.6 / 27.6 dB with 7-bit.
(The tensorrt backend's S8S8 QDQ does not come through here: TensorRT and its host proxy at "basic"
run it unfused.)
"""
from __future__ import annotations

from edgeship.quantize.cpu_choice import TargetCpu, explicit_note, saturation

S8S8_AS_U8S8 = "; ONNX Runtime runs S8S8 on its U8S8 kernels on x86 at graph optimization extended or all"


def choose_reduce_range(explicit: bool | None, activations: str, cpus: list[TargetCpu]) -> tuple[bool, str]:
    """ONNX Runtime's ``reduce_range`` for an artifact run on ``cpus``, and the note saying why:
    the profile's value when set; else True when any target CPU is x86 without VNNI or not known,
    False when every one has VNNI or is ARM. ``activations`` ("uint8" or "int8-symmetric") only
    words the note: x86 runs both on the U8S8 kernels."""
    if explicit is not None:
        return explicit, explicit_note(f"reduce_range = {str(explicit).lower()}", explicit, cpus)
    risky, why = saturation(cpus)
    if risky:
        return True, "7-bit weights (reduce_range" + (S8S8_AS_U8S8 if activations != "uint8" else "") + "): " + why
    return False, f"8-bit weights: {why}"

