"""The app platforms a bundle is made for, and which artifacts each one takes.

android: ExecuTorch ``.pte`` (not delegated to an Apple-only backend) and PyTorch Mobile ``.ptl``
under ``assets/``, with a Kotlin loading snippet. ios: Core ML ``.mlpackage`` folders and
ExecuTorch ``.pte`` under ``Models/``, with a Swift snippet. jetson: the ONNX (fp32 and QDQ)
and TensorRT variants' whole folders (the engine is built on the device from what they hold),
and the device runner. web: onnxruntime-web ``.onnx`` (onnx-web) under ``models/``, as a static
site (a demo page, an ES module that loads and runs the model, onnxruntime-web's wasm files),
written as a zip and, by ``edgeship bundle``, unpacked beside it. linux: AOTInductor ``.pt2`` and
TorchScript ``.pt`` under ``models/``, with a C++ application (``cpp/``: CMake, LibTorch) that
loads and times them (linux.py). x86: OpenVINO IR folders (``model.openvino/``: model.xml and
model.bin) and ONNX under ``models/<variant>/``, with Python programs that run them with the
OpenVINO runtime and ONNX Runtime, and a C++ one (``cpp/``: CMake, ``ov::Core``) for the IRs
(x86.py). ONNX goes in because an x86 box runs ONNX Runtime as naturally as OpenVINO, the x86
profile builds and measures both, and a ``fastest`` bundle must be able to pick either.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

APPLE_ONLY_PARTITIONERS = ("coreml", "mps")


@dataclass(frozen=True)
class Platform:
    """Where a platform's artifacts go in the zip and which backends it takes."""

    name: str
    backends: tuple[str, ...]
    folder: str
    snippet: str | None       # template under bundle/templates, rendered to the same name without .j2
    whole_folder: bool        # copy the variant's folder (scripts beside the model), not only the artifact
    unpacked: bool = False    # also written as a folder beside the zip (a static site, ready to serve)
    by_variant: bool = False  # each artifact (file or folder) under <folder>/<variant>/ by its own name

    def refuses(self, backend: str, options: dict[str, Any]) -> str | None:
        """None when this platform takes such an artifact, else why not."""
        if backend not in self.backends:
            return f"{self.name} bundles take {' and '.join(self.backends)} artifacts, not {backend}"
        partitioner = options.get("partitioner")
        if self.name == "android" and partitioner in APPLE_ONLY_PARTITIONERS:
            return f"an ExecuTorch program delegated to {partitioner} runs only on Apple platforms"
        return None


PLATFORMS: dict[str, Platform] = {
    "android": Platform("android", ("executorch", "pytorch-mobile"), "assets", "ModelLoader.kt.j2", False),
    "ios": Platform("ios", ("coreml", "executorch"), "Models", "ModelLoader.swift.j2", False),
    "jetson": Platform("jetson", ("onnx", "tensorrt"), "models", None, True),
    "web": Platform("web", ("onnx-web",), "models", None, False, unpacked=True),
    "linux": Platform("linux", ("aoti", "torchscript"), "models", None, False),
    "x86": Platform("x86", ("openvino", "onnx"), "models", None, False, by_variant=True),
}


def settings_problems(bundle: Any, variants: list[Any]) -> list[str]:
    """Problems of a profile's ``[bundle]`` section against its variants, one line each."""
    by_name = {v.name: v for v in variants}
    problems = []
    named = bundle.variants if isinstance(bundle.variants, list) else None
    for i, name in enumerate(named or []):
        if name not in by_name:
            from edgeship.errors import did_you_mean

            problems.append(f"bundle.variants[{i}] = \"{name}\": no such variant; the profile has "
                            f"{', '.join(by_name)}{did_you_mean(name, by_name)}")
        elif all(PLATFORMS[p].refuses(by_name[name].backend, by_name[name].options) for p in bundle.platforms):
            reasons = "; ".join(PLATFORMS[p].refuses(by_name[name].backend, by_name[name].options) or ""
                                for p in bundle.platforms)
            problems.append(f"bundle.variants[{i}] = \"{name}\": no platform listed takes it ({reasons})")
    pool = [by_name[n] for n in named if n in by_name] if named else variants
    for i, platform in enumerate(bundle.platforms):
        if all(PLATFORMS[platform].refuses(v.backend, v.options) for v in pool):
            problems.append(f"bundle.platforms[{i}] = \"{platform}\": no variant of this profile goes into it; "
                            f"{platform} bundles take {' and '.join(PLATFORMS[platform].backends)} artifacts")
    return problems
