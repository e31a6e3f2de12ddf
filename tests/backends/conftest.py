"""The fixtures backend tests share with the lowering and quantization tests (tiny models lowered,
calibration data, the culprit model)."""
from tests.lowering.conftest import lower  # noqa: F401
from tests.quantize.conftest import calib_data, culprit_model, lower_culprit, lower_int8, tiny_onnx  # noqa: F401
