"""The tensorrt backend (TensorRT, from ONNX): declaration and options (spec.py), lowering (lower.py)."""
