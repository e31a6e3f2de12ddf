"""The torchscript backend (TorchScript for LibTorch): declaration and options (spec.py), lowering
(lower.py)."""
