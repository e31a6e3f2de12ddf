"""Backends, one package each: ``backends/<name>/`` holds everything edgeship knows of one backend
(declaration ``spec.py``, lowering ``lower.py``, its own int8 quantizer ``quantize.py``, what it
chooses by CPU ``cpu.py``). ``registry.py`` is the one registry; ``spec.py`` and ``base.py`` the
interface. Nothing shared imports a backend's package except through the registry.

This package imports nothing itself, so a backend's declaration can be read without loading the rest.
"""
