"""Input sizes of a model spec: the fixed shapes, or min / opt / max where dimensions are dynamic.

An input marks dimensions dynamic by index, ``dynamic = { 1 = { min = 8, max = 512 } }`` (TOML
keys are strings), with an optional ``opt`` (default: the size in ``shape``) and ``name``.

**Which dimensions are one.** Dimensions that must always be equal (the sequence length of
``input_ids`` and of ``attention_mask``) are one dimension: one ``torch.export.Dim``, one named
dimension of an exported graph, one range in a runtime's optimization profile. The rule:
dimensions with the same ``name`` are one; unnamed dimensions at the same index with the same min
and max are one. Grouped dimensions must agree on min, max and opt. Name dimensions to keep two
same-range dimensions apart (an encoder's and a decoder's length, both 8..512) or to join
dimensions at different indices.

**Sizes.** ``sizes(spec)`` gives each input's shape at "min", "opt" and "max" (only "opt" when
nothing is dynamic): what the artifact must take, and where validation measures it. Capture uses
"opt". torch.export specializes a dimension whose example size is 0 or 1 to that constant, so a
dynamic dimension whose opt is 1 is exported from an example of size 2 (min = 1 is fine: the
exported program takes size 1; only the example must differ from 1).

Nothing here imports torch at module level, nor the spec (which imports this module).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from edgeship.errors import ModelSpecError

if TYPE_CHECKING:
    from torch.export import Dim

SIZE_NAMES = ("min", "opt", "max")
BATCH = "batch"             # the name of the batch dimension a backend asks to be free (its dynamic_batch)
DYNAMIC_BATCH_MAX = 4096    # the largest batch a free batch dimension takes


class DimLike(Protocol):
    """A dynamic dimension as the spec declares it (``InputSpec.Dim``)."""

    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...
    @property
    def opt(self) -> int | None: ...
    @property
    def name(self) -> str | None: ...


class InputLike(Protocol):
    """A spec's input as read here (``InputSpec``; the spec imports this module, so not named)."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def dynamic(self) -> Mapping[str, DimLike]: ...


class SpecLike(Protocol):
    """A model spec as read here (``ModelSpec``): its inputs."""

    @property
    def inputs(self) -> Sequence[InputLike]: ...


@dataclass(frozen=True)
class DynamicDim:
    """One dynamic dimension of one input, with the name of the group it belongs to."""

    input: str
    index: int
    min: int
    opt: int
    max: int
    name: str        # shared by every dimension that is the same dimension


def _declared(inputs: Sequence[InputLike]) -> list[tuple[DynamicDim, bool]]:
    """Each input's dynamic dimensions, named by the group rule, and whether the name was given."""
    unnamed: dict[tuple[int, int, int], str] = {}  # (index, min, max) -> the group's name
    out = []
    for inp in inputs:
        for key, dim in sorted(inp.dynamic.items(), key=lambda kv: int(kv[0])):
            index = int(key)
            name = dim.name or unnamed.setdefault((index, dim.min, dim.max), f"{inp.name}_dim{index}")
            opt = dim.opt if dim.opt is not None else inp.shape[index]
            out.append((DynamicDim(inp.name, index, dim.min, opt, dim.max, name), dim.name is not None))
    return out


def group_problems(inputs: Sequence[InputLike]) -> list[str]:
    """Grouped dimensions that disagree on min, max or opt, and implicit group names a given name
    takes (empty when the groups are consistent). For ModelSpec's validation: one line each."""
    groups: dict[str, list[DynamicDim]] = {}
    declared = _declared(inputs)
    for dim, _ in declared:
        groups.setdefault(dim.name, []).append(dim)
    problems = []
    for name, dims in groups.items():
        sizes = {(d.min, d.opt, d.max) for d in dims}
        if len(sizes) > 1:
            where = ", ".join(f"{d.input} dimension {d.index} (min {d.min}, opt {d.opt}, max {d.max})" for d in dims)
            problems.append(f"dynamic dimensions {where} are one dimension ({name}) but their sizes differ; give "
                            "them the same min, opt and max, or different names")
    given = {d.name for d, explicit in declared if explicit}
    clashes = sorted(given & {d.name for d, explicit in declared if not explicit})
    problems.extend(f"dynamic dimension name {n!r} is also the name of an unnamed dimension; choose another name"
                    for n in clashes)
    return problems


def dynamic_dims(spec: SpecLike) -> list[DynamicDim]:
    """Every dynamic dimension of the spec's inputs, in input order (ModelSpecError when grouped
    dimensions disagree)."""
    problems = group_problems(spec.inputs)
    if problems:
        raise ModelSpecError(f"{getattr(spec, 'source', '') or 'model spec'}: " + "; ".join(problems))
    return [dim for dim, _ in _declared(spec.inputs)]


def is_dynamic(spec: SpecLike) -> bool:
    """True when any input has a dynamic dimension."""
    return any(inp.dynamic for inp in spec.inputs)


def shape_at(inp: InputLike, size: str = "opt") -> list[int]:
    """One input's shape at ``size``: its dynamic dimensions at that size, the others as in ``shape``."""
    if size not in SIZE_NAMES:
        raise ValueError(f"size {size!r}: one of {', '.join(SIZE_NAMES)}")
    shape = list(inp.shape)
    for key, dim in inp.dynamic.items():
        index = int(key)
        shape[index] = {"min": dim.min, "max": dim.max}.get(size, dim.opt or shape[index])
    return shape


def sizes(spec: SpecLike) -> dict[str, dict[str, list[int]]]:
    """Each input's shape by size name: ``{"min": {...}, "opt": {...}, "max": {...}}`` for a spec with
    dynamic dimensions, ``{"opt": {...}}`` (the shapes as written) otherwise."""
    names = SIZE_NAMES if is_dynamic(spec) else ("opt",)
    return {size: {inp.name: shape_at(inp, size) for inp in spec.inputs} for size in names}


def dim_names(spec: SpecLike, dynamic_batch: bool = False) -> dict[str, dict[int, str]]:
    """Each input's free dimensions by index, named by group: what a graph exporter's ``dynamic_axes`` takes
    and the names its graphs carry. With ``dynamic_batch``, dimension 0 of every input whose batch the
    spec leaves fixed is ``batch``."""
    names: dict[str, dict[int, str]] = {inp.name: {} for inp in spec.inputs}
    for dim in dynamic_dims(spec):
        names[dim.input][dim.index] = dim.name
    if dynamic_batch:
        batch = batch_name(spec)
        for inp in spec.inputs:
            names[inp.name].setdefault(0, batch)
    return {name: dict(sorted(axes.items())) for name, axes in names.items()}


def batch_name(spec: SpecLike) -> str:
    """``batch``, or ``batch_`` ... when a dynamic dimension of the spec already has that name."""
    taken = {dim.name for dim in dynamic_dims(spec)}
    name = BATCH
    while name in taken:
        name += "_"
    return name


def export_dynamic_shapes(spec: SpecLike, dynamic_batch: bool = False) -> tuple[dict[int, Dim], ...] | None:
    """torch.export's ``dynamic_shapes``: one ``{index: Dim}`` per input, one Dim per group (so
    grouped dimensions are equal); with ``dynamic_batch`` a free batch (1..DYNAMIC_BATCH_MAX) where
    the spec's batch is fixed. None when nothing is free."""
    from torch.export import Dim

    dims = {d.name: d for d in dynamic_dims(spec)}
    made = {name: Dim(name, min=d.min, max=d.max) for name, d in dims.items()}
    axes = dim_names(spec, dynamic_batch)
    if not any(axes.values()):
        return None
    if dynamic_batch:
        made[batch_name(spec)] = Dim(batch_name(spec), min=1, max=DYNAMIC_BATCH_MAX)
    return tuple({index: made[name] for index, name in axes[inp.name].items()} for inp in spec.inputs)


def describe(spec: SpecLike) -> str:
    """The dynamic dimensions in one line, for notes: ``input_ids[1], attention_mask[1] (input_ids_dim1):
    8..512, opt 128``."""
    groups: dict[str, list[DynamicDim]] = {}
    for dim in dynamic_dims(spec):
        groups.setdefault(dim.name, []).append(dim)
    return "; ".join(", ".join(f"{d.input}[{d.index}]" for d in dims) + f" ({name}): {dims[0].min}..{dims[0].max}, "
                     f"opt {dims[0].opt}" for name, dims in groups.items())
