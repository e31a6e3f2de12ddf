"""The executorch backend (ExecuTorch): declaration and options (spec.py), lowering (lower.py), its own
int8 quantizer (quantize.py)."""
