"""sha256 of an artifact, the same on the host (which records it) and on the device (which checks it).

Standard library only: this file is copied to devices beside runner.py, which imports it as a
sibling module, and the host imports it as ``edgeship.devices.hashing``.
"""
from __future__ import annotations

import hashlib
import os


def sha256_file(path):
    """sha256 (hex) of one file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_path(path):
    """sha256 of a file; for a folder (an .mlpackage), of every file's relative path and sha256."""
    path = str(path)
    if not os.path.isdir(path):
        return sha256_file(path)
    lines = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            lines.append("%s  %s\n" % (sha256_file(full), rel))
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()
