"""A model's outputs, flattened in one order with stable names.

Whatever a model returns (a tensor, a tuple, a dict such as a Hugging Face ``ModelOutput``, or a
nesting of them) becomes a list of ``(name, value)`` pairs in the order torch's pytree, the graph
exporters and the runtimes flatten it: tuples and lists by position, dicts by insertion order. Names:
a lone tensor is ``output``; a top-level tuple's items ``output0``, ``output1``, ...; a dict's items
their keys; nested items ``parent.key`` or ``parent.0``. The device runner flattens artifact outputs
in the same order, so the k-th array a runtime returns is the k-th name here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np


def flatten(out: object) -> list[tuple[str, Any]]:
    """``(name, leaf)`` pairs of a model's return value, in pytree order (see the module docstring)."""
    if isinstance(out, dict):
        return [pair for key, value in out.items() for pair in _flatten(value, str(key))]
    if isinstance(out, (list, tuple)):
        return [pair for i, value in enumerate(out) for pair in _flatten(value, f"output{i}")]
    return [("output", out)]


def _flatten(value: object, name: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [pair for key, v in value.items() for pair in _flatten(v, f"{name}.{key}")]
    if isinstance(value, (list, tuple)):
        return [pair for i, v in enumerate(value) for pair in _flatten(v, f"{name}.{i}")]
    return [(name, value)]


def names_of(out: object) -> list[str]:
    """The flattened output names of a model's return value."""
    return [name for name, _ in flatten(out)]


def graph_name(name: str) -> str:
    """An output name as a converted graph declares it (letters, digits, ``_`` and ``.``)."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", name)


@dataclass(frozen=True)
class OutputSignature:
    """One output as results.json ``model.outputs`` records it: name, per-sample shape, dtype, and
    whether its length varies from sample to sample (detections after NMS)."""

    name: str
    shape: list[int | None]   # batch first; None where the length varies by sample
    dtype: str
    ragged: bool = False

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "shape": self.shape, "dtype": self.dtype, "ragged": self.ragged}


def signature_of(name: str, value: np.ndarray | list[np.ndarray], batch: int) -> OutputSignature:
    """The signature of one reference output: a stacked array [N, ...] or, ragged, one array per sample."""
    if isinstance(value, list):
        first = value[0] if value else np.zeros(0, np.float32)
        shape = [None, *first.shape[1:]] if first.ndim else []
        return OutputSignature(name, shape, str(first.dtype), ragged=True)
    return OutputSignature(name, [batch, *value.shape[1:]], str(value.dtype))


def mismatches(expected: list[OutputSignature], got: list[np.ndarray | list[np.ndarray]],
               precision: str = "fp32") -> list[str]:
    """Every difference between the float model's outputs (``expected``) and an artifact's
    (``got``, in the same flattened order): count, per-sample shape, dtype. Each names both sides.
    An fp16 variant may return float16 where the float model returns float32."""
    problems = []
    if len(got) != len(expected):
        problems.append(f"the artifact returns {len(got)} output(s), the float model {len(expected)} "
                        f"({', '.join(s.name for s in expected)})")
        return problems
    for sig, value in zip(expected, got):
        if sig.ragged != isinstance(value, list):
            what = "a different length per sample" if isinstance(value, list) else "one length for every sample"
            problems.append(f"output {sig.name}: the artifact returns {what}, the float model "
                            f"{'varies' if sig.ragged else 'does not'}")
            continue
        for array in value if isinstance(value, list) else [value]:  # every sample of a ragged output
            problems += [p for p in _differences(sig, array, precision) if p not in problems]
    return problems


def _differences(sig: OutputSignature, array: np.ndarray, precision: str) -> list[str]:
    """How one array (the whole output, or one sample of a ragged one) differs from ``sig``."""
    problems = []
    if list(array.shape[1:]) != sig.shape[1:]:
        got = ", ".join(map(str, array.shape[1:]))
        want = ", ".join(map(str, sig.shape[1:]))
        problems.append(f"output {sig.name}: the artifact returns shape [N, {got}], the float model [N, {want}]")
    half = precision == "fp16" and {str(array.dtype), sig.dtype} == {"float16", "float32"}
    if str(array.dtype) != sig.dtype and not half:
        problems.append(f"output {sig.name}: the artifact returns {array.dtype}, the float model {sig.dtype}")
    return problems
