"""The aoti backend (AOTInductor packages for LibTorch): declaration and options (spec.py), lowering
(lower.py), the instruction set a package is compiled for (cpu.py)."""
