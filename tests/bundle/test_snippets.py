"""Loading snippets: the runtimes' real APIs, with the model's input names, shapes and types."""
from __future__ import annotations

from edgeship.bundle.platforms import PLATFORMS
from edgeship.bundle.selection import Selection
from edgeship.bundle.snippets import identifier, snippet
from edgeship.spec import ModelSpec

SPEC = ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 8, 8]},
                                                    {"name": "mask", "shape": [1, 8], "dtype": "int64"}])


def meta(*artifacts: dict) -> dict:
    return {"model": "m", "artifacts": list(artifacts)}


COREML = {"variant": "coreml-fp16", "backend": "coreml", "precision": "fp16", "path": "Models/coreml-fp16.mlpackage",
          "runtime": {"needs": "iOS16 or later", "compute_units": "CPU_AND_NE",
                      "inputs": [{"name": "image"}, {"name": "mask"}], "outputs": [{"name": "output"}]}}
PTE = {"variant": "et-coreml", "backend": "executorch", "precision": "fp32", "path": "Models/et-coreml.pte",
       "runtime": {"needs": "an ExecuTorch runtime 1.5.x", "written_by": "executorch 1.5.1", "delegate": "Core ML"}}


def test_identifier_turns_variant_names_into_function_names() -> None:
    assert identifier("executorch-xnnpack-fp32") == "ExecutorchXnnpackFp32"
    assert identifier("w8a8.v2_cal") == "W8a8V2Cal"


def test_swift_snippet_loads_core_ml_and_executorch_with_the_packages_feature_names() -> None:
    name, text = snippet(PLATFORMS["ios"], meta(COREML, PTE), SPEC, Selection(PLATFORMS["ios"]))
    assert name == "ModelLoader.swift" and "import CoreML" in text and "import ExecuTorch" in text
    assert 'Bundle.main.url(forResource: "coreml-fp16", withExtension: "mlmodelc")' in text
    assert "try MLModel(contentsOf: url, configuration: configuration)" in text
    assert "configuration.computeUnits = .cpuAndNeuralEngine" in text
    assert '"mask": MLFeatureValue(multiArray: mask),' in text and 'featureValue(for: "output")' in text
    assert "let module = Module(filePath: path)" in text and 'try module.load("forward")' in text
    assert "Tensor<Int64>(mask, shape: [1, 8])," in text and "try Tensor<Float>(module.forward([" in text
    # Core ML has no int64 arrays: the package takes the int64 mask as int32 (backends/coreml/lower.py declares it so)
    assert "`try MLMultiArray(shape: [1, 8], dataType: .int32)` (mask is int64 in the model; Core ML takes int32)." \
        in text and "`try MLMultiArray(shape: [1, 3, 8, 8], dataType: .float32)`," in text


def test_kotlin_snippet_passes_every_input_with_its_array_type() -> None:
    pte = {**PTE, "variant": "pte", "path": "assets/pte.pte", "runtime": {**PTE["runtime"], "delegate": "XNNPACK"}}
    name, text = snippet(PLATFORMS["android"], meta(pte), SPEC, Selection(PLATFORMS["android"]))
    assert (name == "ModelLoader.kt"
            and "fun runPte(module: org.pytorch.executorch.Module, image: FloatArray, mask: LongArray)" in text)
    assert "org.pytorch.executorch.Tensor.fromBlob(mask, longArrayOf(1, 8))" in text


def test_no_snippet_for_an_input_type_the_tensor_apis_lack() -> None:
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 4], "dtype": "float16"}])
    sel = Selection(PLATFORMS["android"])
    assert snippet(PLATFORMS["android"], meta(PTE), spec, sel) == ("ModelLoader.kt", None)
    assert sel.warnings == ["no ModelLoader.kt: the runtimes' android tensor APIs take no float16 arrays"]
