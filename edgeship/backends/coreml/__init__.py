"""The coreml backend (Core ML): declaration and options (spec.py), lowering (lower.py)."""
