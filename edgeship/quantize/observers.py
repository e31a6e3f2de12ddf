"""Calibration for PyTorch's quantizers (FX graph mode and PT2E): run samples through the
observers a prepared model carries, and cache what they saw.

Both flows insert observer modules named ``activation_post_process_N``; after calibration their
state (min/max, histograms) is all that convert needs. That state is what the cache keeps, keyed
by the prepared graph's code (which also fixes where observers sit and which layers stay float),
the weights, the samples and the quantization settings. On a hit the same prepared model is
built again and the observers' state loaded: no sample is run.

The own-contribution sensitivity (``quantize/sensitivity.py``) runs the calibrated prepared graph
with one layer quantized at a time: ``one_layer_plan`` picks that layer's observers and
``run_one_layer`` runs the graph with those quantizing and every other observer passed through
(``run_plans``: inside every part of a model prepared by parts, ``quantize/fx_parts.py``).
"""
from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeship.cache import Cache, CacheEntry, EntryDamaged
from edgeship.calibration import Dataset
from edgeship.quantize.fx_parts import graph_code, graphs, parts_running
from edgeship.quantize.quantized import calibrated

if TYPE_CHECKING:
    import numpy as np
    import torch

OBSERVERS_FILE = "observers.pt"
CALIBRATION_BATCH = 32


def observers(prepared: torch.nn.Module, every_name: bool = False) -> dict[str, torch.nn.Module]:
    """The observer modules of a prepared model, by name; with ``every_name``, also the further
    names of an observer shared by several tensors (as FX and PT2E share one for tensors that must
    have the same quantization)."""
    return {name: m for name, m in prepared.named_modules(remove_duplicate=not every_name)
            if name.rsplit(".", 1)[-1].startswith("activation_post_process") and hasattr(m, "calculate_qparams")}


def run_samples(module: torch.nn.Module, data: Dataset, batch: int, flexible: bool = False) -> None:
    """Every sample through ``module`` (observers record as they go), ``batch`` at a time; a
    ``flexible`` module takes a shorter last batch, else it is padded by repeating its tail."""
    import torch

    with torch.no_grad():
        if flexible:
            names = list(data.inputs)
            for start in range(0, len(data), batch):
                module(*[torch.from_numpy(data.inputs[n][start:start + batch]) for n in names])
            return
        for part in data.batches(batch):
            module(*[torch.from_numpy(a) for a in part.values()])


def takes_any_batch(module: torch.nn.Module, example: tuple[torch.Tensor, ...]) -> bool:
    """Whether ``module`` runs on twice the example batch and answers with twice the rows: then
    calibration runs CALIBRATION_BATCH samples at a time (observers cost per call, not per sample)."""
    import torch

    try:
        with torch.no_grad():
            out = module(*[torch.cat([a, a]) for a in example])
        while isinstance(out, (tuple, list)):
            out = out[0]
        return int(out.shape[0]) == 2 * int(example[0].shape[0])
    except Exception:  # a model tied to its batch size calibrates at that size
        return False


def calibrate_observers(prepared: torch.nn.Module, data: Dataset, batch: int, cache: Cache | None,
                        key_parts: Mapping[str, object], flexible: bool = False) -> dict[str, object]:
    """Calibrate ``prepared`` in place (or restore its observers from the cache); the cache facts."""
    import torch

    # The graphs' code fixes where observers sit; their names are the stored state's keys.
    layout = graph_code(prepared) + "\n".join(observers(prepared))
    key = {**key_parts, "graph_sha256": hashlib.sha256(layout.encode()).hexdigest(),
           "data_sha256": data.fingerprint(), "batch": batch, "flexible": flexible, "torch": torch.__version__}

    def compute(folder: Path) -> None:
        run_samples(prepared, data, batch, flexible)
        torch.save({n: m.state_dict() for n, m in observers(prepared).items()}, folder / OBSERVERS_FILE)

    with calibrated(cache, "torch-observers", key, compute) as (entry, facts):
        if entry.hit and not restore_observers(prepared, entry, cache):
            run_samples(prepared, data, batch, flexible)
            facts["cache"] = "miss"
    return facts


def restore_observers(prepared: torch.nn.Module, entry: CacheEntry, cache: Cache | None) -> bool:
    """Load the observers' state kept in ``entry``, read once and checked against its signed sha256 list;
    False when it is not the file signed (changed after the entry was checked): the entry is discarded,
    with a notice, and the caller calibrates."""
    import torch

    try:
        states = torch.load(io.BytesIO(entry.read_bytes(OBSERVERS_FILE)), weights_only=True)
    except EntryDamaged as e:
        if cache is not None:
            cache.discard_damaged(entry, str(e), "calibrating again")
        return False
    for name, module in observers(prepared).items():
        module.load_state_dict(states[name])
    return True


@dataclass(frozen=True)
class QuantParams:
    """One observer's quantization, as convert writes it: its own ``calculate_qparams()`` (computed
    once; the observer's statistics are never updated), its integer range and dtype, per tensor
    or per channel along ``axis``."""

    scale: torch.Tensor
    zero_point: torch.Tensor
    quant_min: int
    quant_max: int
    dtype: torch.dtype
    axis: int | None

    @classmethod
    def of(cls, observer: Any) -> QuantParams | None:  # an observer or FakeQuantize module
        """The observer's quantization; None for one that does not quantize to integers."""
        import torch

        dtype = {torch.quint8: torch.uint8, torch.qint8: torch.int8, torch.qint32: torch.int32}.get(
            observer.dtype, observer.dtype)
        if dtype not in (torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32):
            return None
        scale, zero_point = observer.calculate_qparams()
        per_channel = observer.qscheme in (torch.per_channel_symmetric, torch.per_channel_affine)
        return cls(scale, zero_point, int(observer.quant_min), int(observer.quant_max), dtype,
                   int(observer.ch_axis) if per_channel else None)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` quantized and dequantized, with the quantized_decomposed ops convert_pt2e writes."""
        import torch
        import torch.ao.quantization.fx._decomposed  # noqa: F401  registers torch.ops.quantized_decomposed

        ops = torch.ops.quantized_decomposed
        limits = (self.quant_min, self.quant_max, self.dtype)
        if self.axis is None:
            scale, zero_point = float(self.scale), int(self.zero_point)
            return ops.dequantize_per_tensor(ops.quantize_per_tensor(x, scale, zero_point, *limits),
                                             scale, zero_point, *limits)
        scales, zero_points = self.scale.to(torch.float32), self.zero_point.to(torch.int64)
        return ops.dequantize_per_channel(ops.quantize_per_channel(x, scales, zero_points, self.axis, *limits),
                                          scales, zero_points, self.axis, *limits)


@dataclass
class OneLayer:
    """Where a calibrated prepared graph quantizes when only one layer is: the quantization of
    some inputs of the layer's nodes (on those edges only: other readers of the same tensor stay
    float), of the observer nodes after its outputs (for every reader, as convert does), and the
    modules called instead of the layer's own (FX keeps weights inside its modules). Every other
    observer passes its input through."""

    inputs: dict[str, dict[int, QuantParams]] = field(default_factory=dict)  # node -> {argument: qparams}
    outputs: dict[str, QuantParams] = field(default_factory=dict)            # observer node -> qparams
    modules: dict[str, torch.nn.Module] = field(default_factory=dict)        # call_module target -> module


def one_layer_plan(prepared: torch.nn.Module, nodes: list[Any],  # torch.fx.Node
                   qparams: Callable[[torch.nn.Module], QuantParams | None]) -> OneLayer:
    """The observers that belong to ``nodes`` (one layer's calls in ``prepared``): each observer an
    argument comes from (input activation, and weight in PT2E), and the first observer after the
    node's output, through a fused activation (conv-relu). ``qparams(observer)`` computes or
    recalls an observer's quantization."""
    found = observers(prepared, every_name=True)
    plan = OneLayer()
    for node in nodes:
        plan.inputs[node.name] = {i: q for i, arg in enumerate(node.args)
                                  if _observer_node(arg, found) and (q := qparams(found[arg.target])) is not None}
        after = _output_observer(node, found)
        if after is not None and (q := qparams(found[after.target])) is not None:
            plan.outputs[after.name] = q
    return plan


def _observer_node(node: Any, found: dict[str, torch.nn.Module]) -> bool:
    return getattr(node, "op", None) == "call_module" and node.target in found


def _output_observer(node: Any, found: dict[str, torch.nn.Module], steps: int = 2) -> Any:
    """The observer reading ``node``'s output, directly or through up to ``steps`` single-input ops."""
    for _ in range(steps + 1):
        users = list(node.users)
        if len(users) != 1:
            return None
        node = users[0]
        if _observer_node(node, found):
            return node
        if len(node.all_input_nodes) != 1:
            return None
    return None


def run_one_layer(prepared: torch.fx.GraphModule, plan: OneLayer, data: Dataset, batch: int) -> list[list[np.ndarray]]:
    """The outputs of ``prepared`` on ``data`` (``batch`` samples a run, each output as a numpy
    array) with only ``plan``'s observers quantizing; an empty plan gives the float model's."""
    return run_batches(one_layer_interpreter(prepared, plan), data, batch)


def one_layer_interpreter(prepared: torch.fx.GraphModule, plan: OneLayer) -> Callable[..., object]:
    """A function that runs ``prepared``'s graph on its inputs with only ``plan``'s observers
    quantizing and every other observer passing its input through, never called (so never updated):
    what ``run_one_layer`` runs, and what runs inside each part of a model quantized by parts."""
    import torch

    found = observers(prepared, every_name=True)

    class OneLayerInterpreter(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            if n.op == "call_module" and n.target in found:  # an observer: never called, so never updated
                value = self.env[n.args[0]]
                return plan.outputs[n.name].apply(value) if n.name in plan.outputs else value
            if n.name not in plan.inputs and not (n.op == "call_module" and n.target in plan.modules):
                return super().run_node(n)
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            args = tuple(plan.inputs.get(n.name, {})[i].apply(a) if i in plan.inputs.get(n.name, {}) else a
                         for i, a in enumerate(args))
            if n.op == "call_module" and n.target in plan.modules:
                return plan.modules[n.target](*args, **kwargs)
            return getattr(self, n.op)(n.target, args, kwargs)

    return lambda *inputs: OneLayerInterpreter(prepared).run(*inputs)


def run_plans(prepared: torch.nn.Module, plans: dict[str, OneLayer], data: Dataset,
              batch: int) -> list[list[np.ndarray]]:
    """The outputs of a calibrated prepared model (whole, or by parts) on ``data`` with each graph's
    observers quantizing as ``plans`` (by the scope it was traced at) say; none: float."""
    if graphs(prepared)[0][1] is prepared:  # traced whole: one graph
        return run_batches(one_layer_interpreter(prepared, plans.get("", OneLayer())), data, batch)
    with parts_running(prepared, lambda scope, graph: one_layer_interpreter(graph, plans.get(scope, OneLayer()))):
        return run_batches(prepared, data, batch)


def run_batches(run: Callable[..., object], data: Dataset, batch: int) -> list[list[np.ndarray]]:
    """The outputs of ``run`` (a module, or a function of the model's inputs) on ``data``, ``batch``
    samples a call (the last batch padded by repeating its tail): per batch, every tensor of the
    output structure as a numpy array, in its flattened order (``edgeship.outputs``)."""
    import torch

    with torch.no_grad():
        return [_numpy_leaves(run(*[torch.from_numpy(a) for a in part.values()])) for part in data.batches(batch)]


def _numpy_leaves(out: object) -> list[np.ndarray]:
    """The tensors of a model's output structure (tuples, lists, dicts), as numpy arrays."""
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _numpy_leaves(item)]
    return [out.detach().numpy().copy()] if hasattr(out, "detach") else []
