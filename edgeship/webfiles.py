"""Where onnxruntime-web is: the npm package that the browser device and web bundles serve.

``make setup`` installs the version pinned in ``web/package-lock.json`` with ``npm ci`` into
``web/node_modules`` of the checkout; ``$EDGESHIP_ORT_WEB`` names another copy of the package
folder (the one holding its ``package.json`` and ``dist/``). Nothing is ever fetched from a CDN.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

# The files onnxruntime-web's wasm backend needs: the ES module and the threaded SIMD build.
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
ORT_CHECKOUT = Path(__file__).resolve().parents[1] / "web" / "node_modules" / "onnxruntime-web"
SETUP_HINT = "make setup runs npm ci in web/; or set EDGESHIP_ORT_WEB to the package's folder"


def ort_web_package() -> Path | None:
    """onnxruntime-web's package folder: $EDGESHIP_ORT_WEB, else web/node_modules in the checkout."""
    env = os.environ.get("EDGESHIP_ORT_WEB")
    path = Path(env).expanduser() if env else ORT_CHECKOUT
    return path if (path / "package.json").is_file() else None


def ort_web_version() -> str | None:
    """The installed onnxruntime-web's version, or None when it is not installed."""
    package = ort_web_package()
    if package is None:
        return None
    try:
        return str(json.loads((package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def ort_web_problem() -> str | None:
    """Why onnxruntime-web cannot be served from here (None: it can)."""
    package = ort_web_package()
    if package is None:
        return f"onnxruntime-web is not installed ({SETUP_HINT})"
    absent = [f for f in ORT_FILES if not (package / "dist" / f).is_file()]
    return f"onnxruntime-web at {package} lacks dist/{', dist/'.join(absent)}" if absent else None
