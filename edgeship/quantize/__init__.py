"""Quantization: each backend's own int8 path, fed by calibration data, with the cost measured.

``settings`` (profile models, what each backend supports) imports nothing heavy; the backend
quantizers live with their backends (``backends/<name>/quantize.py``) and import their SDKs inside functions.
"""
