"""Every backend implementation, by name: what the pipeline lowers with and loads from."""
from __future__ import annotations

from edgeship.lowering.aoti import AotiBackend
from edgeship.lowering.base import Backend
from edgeship.lowering.coreml import CoremlBackend
from edgeship.lowering.executorch import ExecutorchBackend
from edgeship.lowering.mobile import PytorchMobileBackend
from edgeship.lowering.onnx import OnnxBackend
from edgeship.lowering.onnx_web import OnnxWebBackend
from edgeship.lowering.openvino import OpenvinoBackend
from edgeship.lowering.registry import SPECS
from edgeship.lowering.tensorrt import TensorrtBackend
from edgeship.lowering.torchscript import TorchscriptBackend

BACKENDS: dict[str, Backend] = {cls.name: cls() for cls in (
    PytorchMobileBackend, ExecutorchBackend, OnnxBackend, OnnxWebBackend, TensorrtBackend, CoremlBackend,
    AotiBackend, TorchscriptBackend, OpenvinoBackend)}

if set(BACKENDS) != set(SPECS):  # a declaration without an implementation, or the reverse
    raise RuntimeError(f"declared backends {sorted(SPECS)} differ from implemented {sorted(BACKENDS)}")
