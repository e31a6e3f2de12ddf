"""Helpers for the bundle tests: a small bundle, and an attacker's copy of one (entries changed
and manifest.json rehashed to match, so only a signature or a limit can tell)."""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

from edgeship.bundle.archive import MANIFEST, write_zip

RUNNER = b"import sys\nprint('measuring')\n"


def small_bundle(dest: Path) -> Path:
    """A jetson-like bundle: a model, labels, model.json and the device runner."""
    entries: dict[str, bytes | Path] = {"models/m/model.onnx": os.urandom(40_000), "model.json": b'{"model": "m"}\n',
                                        "labels.txt": b"a\nb\n", "runner/runner.py": RUNNER}
    return write_zip(dest, entries, {"platform": "jetson"})


def forge(src: Path, dest: Path, change: dict[str, bytes | None]) -> Path:
    """A copy of ``src`` with entries replaced or added (bytes) or dropped (None), and a manifest
    whose file list is rehashed to match: the bundle's integrity check passes on it."""
    with zipfile.ZipFile(src) as zin:
        files = {n: zin.read(n) for n in zin.namelist() if n != MANIFEST}
        manifest = json.loads(zin.read(MANIFEST))
    for name, data in change.items():
        if data is None:
            files.pop(name, None)
        else:
            files[name] = data
    manifest["files"] = [{"path": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
                         for n, d in sorted(files.items())]
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, data in sorted(files.items()):
            zout.writestr(name, data)
        zout.writestr(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return dest
