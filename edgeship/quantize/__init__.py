"""Quantization: each backend's own int8 path, fed by calibration data, with the cost measured.

``settings`` (profile models, what each backend supports) imports nothing heavy; the backend
modules (``mobile``, ``executorch``, ``onnx``) import their SDKs inside functions.
"""
