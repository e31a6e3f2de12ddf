"""``module:callable`` entries (a model's factory, a data source), imported from the folder of the
file that names them.

That folder is on ``sys.path`` only while the entry is imported (or its source file looked up), so
one model's folder does not stay importable for the rest of the process.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgeship.errors import EdgeshipError, first_line


@contextmanager
def importable(folder: Path | None) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for the duration of the block (left alone when already there)."""
    path = None if folder is None else str(folder)
    added = path is not None and path not in sys.path
    if added:
        sys.path.insert(0, path)
    try:
        yield
    finally:
        if added and path in sys.path:
            sys.path.remove(path)


def import_entry(entry: str, base_dir: Path | None, error_type: type[EdgeshipError], role: str = "entry") -> object:
    """The object ``module:callable`` names, imported with ``base_dir`` importable.

    A failure raises ``error_type`` naming the entry (as ``role``, e.g. ``data source``), the
    module and the first line of what went wrong.
    """
    module_name, _, attr = entry.partition(":")
    with importable(base_dir):
        try:
            obj = importlib.import_module(module_name)
        except Exception as e:  # any import-time failure is the user's code, reported by its first line
            where = f" from {base_dir}" if base_dir is not None else ""
            raise error_type(f"{role} {entry}: cannot import {module_name!r}{where}: "
                             f"{type(e).__name__}: {first_line(e)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise error_type(f"{role} {entry}: module {module_name!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def entry_source(entry: str, base_dir: Path | None) -> Path | None:
    """The source file of the module of ``entry`` (``module:callable`` or a module name), found
    without running the module; None for built-in modules and modules that cannot be found."""
    module_name = entry.partition(":")[0]
    with importable(base_dir):
        try:
            spec = importlib.util.find_spec(module_name)
        except (ImportError, ValueError):
            return None
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and os.path.isfile(origin) else None
