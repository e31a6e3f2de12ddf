"""A ``torch.nn.Module`` saved whole for edgeship's own processes, and loaded back only as saved.

``save_module`` writes the module with ``torch.save`` and cloudpickle as its pickler, so a class
defined in ``__main__`` or a notebook travels by value, its code with it; classes and functions that
can be imported (torchvision's, a module of the project's) travel by reference, and the source files
of their modules are recorded. The file is the same, byte for byte, for the same module in any
process: cloudpickle names each class it carries by value with a random id (cloudpipe/cloudpickle#510),
replaced here by one made from the pickle's own content. Its sha256 is therefore the module's state
and the code it carries, and is what a model spec's entry (:func:`load_saved`) checks before it
unpickles anything: a file that is not the one saved is refused, never run.

Not stable across processes (a new file, so a cache miss, never a wrong hit): a set of two or more
strings held by the module (pickled in hash order) and classes whose ``__module__`` cloudpickle cannot
import by name yet are not in ``__main__``.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeship.devices.hashing import sha256_file
from edgeship.errors import ModelSpecError, first_line

if TYPE_CHECKING:
    import torch

ENTRY = "edgeship.objects.saved:load_saved"


@dataclass
class Saved:
    """What ``save_module`` wrote: the file's sha256 and size, and the code it refers to by name:
    each referenced module's source sha256, and the folders those modules are imported from."""

    sha256: str
    size: int
    sources: dict[str, str] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)

    def entry_kwargs(self, path: Path) -> dict[str, object]:
        """The model spec's ``entry_kwargs`` for :func:`load_saved` of the file at ``path``."""
        return {"path": str(path), "sha256": self.sha256, "sources": self.sources, "paths": self.paths}


def save_module(module: torch.nn.Module, path: Path) -> Saved:
    """Write ``module`` to ``path`` (a new file); ModelSpecError naming what cannot be pickled."""
    referenced: set[str] = set()
    first = _Sink()
    _save(module, first, salt=None, referenced=referenced)  # class ids from their order: the content's hash
    with open(path, "xb") as f:
        sink = _Sink(f)
        _save(module, sink, salt=first.hexdigest(), referenced=set())
    return Saved(sink.hexdigest(), sink.size, code_sources(referenced), import_roots(referenced))


def _save(module: torch.nn.Module, sink: _Sink, salt: str | None, referenced: set[str]) -> None:
    import torch

    try:
        torch.save(module, sink, pickle_module=_pickling(salt, referenced))
    except Exception as e:  # whatever pickling a user's module raises: a lock, an open file, a C object
        raise ModelSpecError(f"module: {type(module).__name__} cannot be saved for edgeship's own processes "
                             f"(torch.save with cloudpickle): {type(e).__name__}: {first_line(e)[:300]}; keep "
                             "objects that cannot be pickled (open files, locks, threads) out of the module") from None


class _Sink:
    """A write-only stream that hashes what is written through it (into ``file`` when given)."""

    def __init__(self, file: io.BufferedWriter | None = None) -> None:
        self.file = file
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        if self.file is not None:
            self.file.write(data)
        return len(data)

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def hexdigest(self) -> str:
        return self.hash.hexdigest()


def _pickling(salt: str | None, referenced: set[str]) -> types.SimpleNamespace:
    """A ``pickle_module`` for torch.save: cloudpickle's Pickler, with each class carried by value named
    by its order (``salt`` None) or by ``salt`` and its order, and ``referenced`` filled with the modules
    of the classes and functions pickled by name."""
    import cloudpickle
    from cloudpickle import cloudpickle as internals

    skeletons = (internals._make_skeleton_class, internals._make_skeleton_enum)
    order: dict[type, int] = {}

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:  # noqa: ANN401 - pickle's own protocol
            reduced = super().reducer_override(obj)
            if reduced is NotImplemented:
                if isinstance(obj, (type, types.FunctionType)):
                    referenced.add(obj.__module__)
                return reduced
            if isinstance(obj, type) and reduced[0] in skeletons and _is_class_id(reduced[1][-2]):
                index = order.setdefault(obj, len(order))
                name = f"{index:032x}" if salt is None else hashlib.sha256(f"{salt}:{index}".encode()).hexdigest()[:32]
                args = reduced[1]
                return (reduced[0], (*args[:-2], name, args[-1]), *reduced[2:])
            return reduced

    return types.SimpleNamespace(Pickler=Pickler, __name__="cloudpickle")


def _is_class_id(value: object) -> bool:
    """cloudpickle's class tracker id: 32 hex digits (where its skeleton arguments hold it)."""
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def code_sources(modules: set[str]) -> dict[str, str]:
    """sha256 of the Python source file of each module (those without one: built-in, compiled, left out)."""
    out = {}
    for name in sorted(modules):
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and file.endswith(".py") and os.path.isfile(file):
            out[name] = sha256_file(file)
    return out


def import_roots(modules: set[str]) -> list[str]:
    """The folders ``modules`` are imported from (a package's parent folder): the runner processes start
    elsewhere, and a notebook's own ``model.py`` is importable only from its folder. Folders already on a
    runner's path (site-packages, the standard library) are left as they are there."""
    roots = set()
    for name in modules:
        top = sys.modules.get(name.split(".")[0])
        file = getattr(top, "__file__", None)
        if file:
            root = Path(file).resolve().parent
            roots.add(str(root.parent if hasattr(top, "__path__") else root))
    return sorted(roots)


def load_saved(path: str, sha256: str, sources: dict[str, str] | None = None,
               paths: list[str] | None = None) -> torch.nn.Module:
    """The module ``save_module`` wrote to ``path``: unpickled only when the file's sha256 is ``sha256``
    (ModelSpecError otherwise), with ``paths`` importable; ModelSpecError when a module it refers to by
    name now has other source than ``sources`` records."""
    import torch

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ModelSpecError(f"{path}: the module edgeship saved cannot be read ({e.strerror or e}); "
                             "build again from the module") from None
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise ModelSpecError(f"{path}: refused: its sha256 is {found[:12]}..., not {sha256[:12]}... as edgeship "
                             "saved it: the file changed after it was written, and is not loaded")
    with _importable(paths or []):
        module = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    changed = [name for name, sha in code_sources(set(sources or {})).items() if sha != (sources or {})[name]]
    if changed:
        raise ModelSpecError(f"{path}: the source of {', '.join(changed)} changed since the module was saved; "
                             "build again from the module")
    return module


@contextlib.contextmanager
def _importable(folders: list[str]) -> Iterator[None]:
    added = [f for f in folders if f not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
