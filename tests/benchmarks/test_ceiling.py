"""benchmarks/ceiling.py: resnet18's convolutions and linear layer as the GEMMs whose int8 times
bound a runtime's (make bench-ceiling, make bench-profile). No kernel is timed here."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from ceiling import gemm_shapes  # noqa: E402


def test_gemm_shapes_of_resnet18_are_its_layers_as_im2col_gemms_in_forward_order():
    shapes = gemm_shapes("resnet18")
    assert [s["kind"] for s in shapes] == ["conv"] * 20 + ["linear"]
    by_layer = {s["layer"]: (s["m"], s["k"], s["n"]) for s in shapes}
    assert by_layer["conv1"] == (112 * 112, 3 * 7 * 7, 64)
    assert by_layer["layer2.0.downsample.0"] == (28 * 28, 64, 128)
    assert by_layer["layer4.1.conv2"] == (7 * 7, 512 * 9, 512)
    assert by_layer["fc"] == (1, 512, 1000)
    # the downsample runs after its block's conv2 (torchvision's BasicBlock.forward): XNNPACK's order
    names = [s["layer"] for s in shapes]
    assert names.index("layer3.0.conv2") < names.index("layer3.0.downsample.0") < names.index("layer3.1.conv1")
    assert sum(s["m"] * s["k"] * s["n"] for s in shapes) == 1_814_073_344
