"""A ``torch.nn.Module``, its example inputs and its data, made into the model spec a build runs from.

The module (``saved.save_module``), the data (``data.write_npz``) and the class names are written
into a stage cache entry (namespace ``module``) keyed by those files' sha256: the same module and
data give the same folder, so the spec, whose paths and entry arguments name it and which keys every
stage, is the same build after build and the stages come from the cache; another weight, another
``forward`` or another sample gives another folder and another key. Like every cache entry the
folder is made with mode 0700 and checked against its signed list of files when found again; the
module's file is also checked against its sha256 each time a process loads it (``saved.load_saved``),
so it is edgeship's own file, not a checkpoint to trust.

Example inputs give the inputs' names (``input``, or ``input_0``, ``input_1``, ... for several; a
dict's keys), shapes (batch first) and dtypes, and, for integer inputs, the range of the random
values a build uses where it has no data (the examples' smallest to largest value).
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgeship.cache import Cache, file_hashes
from edgeship.calibration.datasets import is_callable
from edgeship.calibration.provider import samples_wanted
from edgeship.config import validate
from edgeship.errors import DataError, ModelSpecError
from edgeship.fsutil import new_private_folder
from edgeship.model import check_forward
from edgeship.objects.data import FORMS, dataset_of, write_npz
from edgeship.objects.saved import ENTRY, save_module
from edgeship.profile import Profile
from edgeship.spec import ModelSpec

if TYPE_CHECKING:
    import torch

NAMESPACE = "module"
MODULE, LABELS = "module.pt", "labels.txt"
DTYPES = ("float32", "float16", "int64", "int32", "uint8", "bool")
INPUT_FORMS = ("a torch.Tensor (one input), a tuple of tensors (one per forward argument, in order) or a dict "
               "{input name: tensor} (in forward's order)")


@dataclass
class Materialized:
    """The model spec made from the objects, the folder holding its files, and what making it cost."""

    spec: ModelSpec
    folder: Path
    bytes: int
    seconds: float
    reused: bool  # the folder was already in the stage cache (the same module and data)


def materialize(module: object, example_inputs: object, profile: Profile, cache: Cache, *,
                calibration: object = None, evaluation: object = None, labels: object = None,
                task: str | None = None, name: str | None = None,
                preprocess: dict[str, object] | None = None) -> Materialized:
    """The model spec for ``module``: ModelSpecError for a module or example inputs edgeship cannot take,
    DataError for data (each naming the argument and what is taken). ``profile`` says how many samples of
    an iterable are read; calibration data is read only when one of its variants calibrates."""
    start = time.perf_counter()
    source = f"edgeship.build(module={type(module).__name__})"
    fields = _declared(module, example_inputs, name=name, task=task, preprocess=preprocess)
    base = validate(fields, ModelSpec, source, ModelSpecError)
    check_forward(module, base)
    scratch = new_private_folder("edgeship-module-")
    try:
        saved = save_module(module, scratch / MODULE)  # a torch.nn.Module: _declared checked it
        paths = _write_data(scratch, base, profile, calibration=calibration, evaluation=evaluation)
        paths.update(_labels(scratch, labels))
        files = file_hashes(scratch)
        entry = cache.get_or_compute(NAMESPACE, {"files": files}, lambda dest: _move(scratch, dest))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    folder = entry.path
    # A name written into the scratch folder is now in the entry; a path the caller gave is absolute and stays.
    where = {key: str(folder / path) for key, path in paths.items()}
    fields.update(entry_kwargs=saved.entry_kwargs(folder / MODULE),
                  data={role: where[role] for role in ("calibration", "evaluation") if role in where},
                  **({"labels": where["labels"]} if "labels" in where else {}))
    spec = validate(fields, ModelSpec, source, ModelSpecError, context={"base_dir": folder})
    spec.base_dir, spec.source = folder, source
    size = sum((folder / f).stat().st_size for f in files)
    return Materialized(spec, folder, size, time.perf_counter() - start, entry.hit)


def _declared(module: object, example_inputs: object, **given: object) -> dict[str, object]:
    """The spec's fields that the objects declare: name, entry, inputs, and task and preprocess when given;
    ModelSpecError for a module that is not a torch.nn.Module."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ModelSpecError(f"module: a {type(module).__name__}, not a torch.nn.Module; edgeship.build takes "
                             "(module, example_inputs, target=...) or, for a model spec file, "
                             "(target, model=\"model.toml\")")
    fields: dict[str, object] = {"name": given.pop("name") or default_name(module), "entry": ENTRY,
                                 "inputs": input_specs(example_inputs)}
    return {**fields, **{key: value for key, value in given.items() if value is not None}}


def default_name(module: torch.nn.Module) -> str:
    """The model's name in output paths: its class name, kept to the characters a name may hold."""
    return re.sub(r"[^A-Za-z0-9._-]", "", type(module).__name__).lstrip("._-") or "model"


def input_specs(example_inputs: object) -> list[dict[str, object]]:
    """The spec's ``inputs`` from the example inputs; ModelSpecError naming the one edgeship cannot take."""
    import torch

    if isinstance(example_inputs, torch.Tensor):
        named: dict[object, object] = {"input": example_inputs}
    elif isinstance(example_inputs, dict) and example_inputs:
        named = dict(example_inputs)
    elif isinstance(example_inputs, (tuple, list)) and example_inputs:
        many = len(example_inputs) > 1
        named = {f"input_{i}" if many else "input": t for i, t in enumerate(example_inputs)}
    else:
        raise ModelSpecError(f"example_inputs: {_what(example_inputs)}; example_inputs is {INPUT_FORMS}")
    return [_input(key, value, isinstance(example_inputs, dict), i) for i, (key, value) in enumerate(named.items())]


def _input(key: object, value: object, by_name: bool, index: int) -> dict[str, object]:
    import torch

    where = f"example_inputs[{key!r}]" if by_name else f"example_inputs[{index}]"
    if by_name and not isinstance(key, str):
        raise ModelSpecError(f"{where}: input names are strings (forward's argument names, e.g. \"image\")")
    if not isinstance(value, torch.Tensor):
        raise ModelSpecError(f"{where}: {_what(value)}, not a torch.Tensor; example_inputs is {INPUT_FORMS}")
    dtype = str(value.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise ModelSpecError(f"{where}: dtype {dtype}; inputs are one of {', '.join(DTYPES)} (cast the example "
                             "input, e.g. .float(), and the model's first layer takes it as it does now)")
    if value.ndim == 0:
        raise ModelSpecError(f"{where}: a 0-d tensor; an input has its batch dimension first, e.g. shape [1, 3, 224, "
                             "224]")
    spec: dict[str, object] = {"name": key, "shape": list(value.shape), "dtype": dtype}
    if dtype not in ("float32", "float16", "bool") and value.numel():
        spec["range"] = [int(value.min()), int(value.max()) + 1]
    return spec


def _what(value: object) -> str:
    return "empty" if isinstance(value, (tuple, list, dict)) and not value else f"a {type(value).__name__}"


def _write_data(folder: Path, spec: ModelSpec, profile: Profile, **values: object) -> dict[str, str]:
    """Each data argument as the spec's ``[data]``: a path as it is (absolute), an object as an .npz
    written into ``folder``; calibration data only when the profile calibrates."""
    limits = {"calibration": max(samples_wanted(profile).values(), default=0), "evaluation": profile.evaluation.samples}
    out = {}
    for role, value in values.items():
        if value is None or (role == "calibration" and not limits[role]):
            continue
        if isinstance(value, (str, os.PathLike)):
            if is_callable(str(value)):
                raise DataError(f"{role}={str(value)!r}: a module:callable source is for model spec files; pass what "
                                f"it returns (an iterable of batches) instead. {role}= is {FORMS}")
            out[role] = str(Path(value).absolute())
            continue
        seed = (profile.calibration if role == "calibration" else profile.evaluation).seed
        write_npz(folder / f"{role}.npz", dataset_of(value, spec, role, limits[role], seed))
        out[role] = f"{role}.npz"
    return out


def _labels(folder: Path, labels: object) -> dict[str, str]:
    """``labels``: class names (a list of strings, written to labels.txt) or a labels file's path."""
    if labels is None:
        return {}
    if isinstance(labels, (str, os.PathLike)):
        return {"labels": str(Path(labels).absolute())}
    if not isinstance(labels, (list, tuple)) or not labels or not all(
            isinstance(n, str) and n.strip() and "\n" not in n and "\r" not in n for n in labels):
        raise ModelSpecError(f"labels: {_what(labels)}; labels is the class names, in class index order: a list of "
                             "non-empty one-line strings, or the path of a labels file (one name a line)")
    (folder / LABELS).write_text("".join(f"{n.strip()}\n" for n in labels), encoding="utf-8")
    return {"labels": LABELS}


def _move(scratch: Path, dest: Path) -> None:
    for path in sorted(scratch.iterdir()):
        shutil.move(path, dest / path.name)
