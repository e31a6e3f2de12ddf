"""Backends: declarations in ``registry.py``, one implementation module per backend, all of them
collected in ``backends.py`` (``BACKENDS``); capture (``capture.py``) feeds them.

This package imports nothing itself, so the registry can be read without loading any backend.
Adding a backend: its declaration in ``registry.py``, its module here (a class subclassing the
declaration and ``base.Backend``), one line in ``backends.py``, and its tests.
"""
