"""The openvino backend (OpenVINO): declaration and options (spec.py), lowering (lower.py), its own
int8 quantizer (quantize.py), what it chooses by the target CPUs (cpu.py)."""
