"""The onnx-web backend (onnxruntime-web in the browser): declaration and options (spec.py), lowering
(lower.py)."""
