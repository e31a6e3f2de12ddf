"""``module:callable`` entries (a model's factory, a data source), imported from the folder of the
file that names them.

That folder is on ``sys.path`` only while the entry is imported (or its source file looked up), so
one model's folder does not stay importable for the rest of the process.
"""
from __future__ import annotations

import importlib
import importlib.machinery
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
            forget_shadowed(module_name, base_dir)
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


def _origin_in(folder: Path, top: str) -> str | None:
    """The file that ``import top`` finds in ``folder`` (a module or a package), or None."""
    spec = importlib.machinery.PathFinder.find_spec(top, [str(folder)])
    return getattr(spec, "origin", None) if spec is not None else None


def forget_shadowed(module_name: str, base_dir: Path | None) -> None:
    """Drop from ``sys.modules`` a module of this name imported earlier from another place when
    ``base_dir`` has its own: two specs in two folders each with a ``model.py`` must get their own
    ``model:build``, not the first one imported (Python caches modules by name, not by file)."""
    if base_dir is None:
        return
    top = module_name.split(".")[0]
    cached = sys.modules.get(top)
    if cached is None:
        return
    here, there = _origin_in(base_dir, top), os.path.realpath(getattr(cached, "__file__", None) or "")
    if here is None or os.path.realpath(here) == there or not there:
        return
    if any(there.startswith(os.path.realpath(p) + os.sep) for p in {sys.prefix, sys.base_prefix}):
        return  # an installed package (numpy, torch) is never re-imported: its extensions load once per process
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def entry_source(entry: str, base_dir: Path | None) -> Path | None:
    """The source file of the module of ``entry`` (``module:callable`` or a module name), found
    without running the module; None for built-in modules and modules that cannot be found."""
    module_name = entry.partition(":")[0]
    with importable(base_dir):
        try:
            forget_shadowed(module_name, base_dir)
            spec = importlib.util.find_spec(module_name)
        except (ImportError, ValueError):
            return None
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and os.path.isfile(origin) else None
