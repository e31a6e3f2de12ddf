"""torch.fx quantization of a model FX cannot trace whole: its traceable parts, one graph each.

The FX quantizers (PyTorch's ``prepare_fx`` and the converters' quantizers built on it) trace the model
symbolically, and Python control flow on tensors stops them: Hugging Face's BertModel slices by
``seq_length`` and branches on the mask, torchvision's SSD calls NMS. Where that happens, the
module whose own code stopped the tracer becomes a plain call (an FX leaf) and the tracer tries
again; a leaf is then traced itself, or, when its own code cannot be traced either, its children
are, down to the layers. Every Conv and Linear reachable that way is quantized in a graph of its
part; the code between parts runs in float, as written. Intel Neural Compressor treats Hugging
Face models the same way.

A part is traced for the call the model made to it on the example inputs: tensors become the
graph's inputs, every other argument (``None``, flags, sizes) is fixed to that call's value, and
a later call with other values is refused rather than run through a graph made for the first one.

Per-layer sensitivity (and ``keep_float``) works on the parts too: ``graphs`` lists every part's
graph, ``quantized_layers`` names each layer in them by the model's module path (``global_name``),
and ``parts_running`` runs the whole model with each part's graph handed to an interpreter.
"""
from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from edgeship.errors import LoweringError
from edgeship.lowering.capture import fx_failure

if TYPE_CHECKING:
    import torch
    from torch.utils._pytree import TreeSpec

# prepare(module, example_inputs, non_traceable_names, scope) -> a prepared torch.fx.GraphModule; scope is
# the traced module's qualified name ("" for the whole model); local_names() maps the model's names into it.
Prepare = Callable[["torch.nn.Module", tuple["torch.Tensor", ...], list[str], str], "torch.fx.GraphModule"]
INNER = "inner"   # the traced module's name inside a part's Bound wrapper


@dataclass
class FxParts:
    """The model with its prepared parts in place, which parts, and where FX stopped."""

    module: torch.nn.Module
    parts: list[str]                                   # qualified names; [""] when traced whole
    untraceable: dict[str, str] = field(default_factory=dict)   # module -> where and why FX stopped
    leaves: dict[str, list[str]] = field(default_factory=dict)  # part -> its submodules FX left as calls
    layers: tuple[int, int] = (0, 0)                   # (Conv/Linear layers inside parts, all of them)

    @property
    def whole(self) -> bool:
        return self.parts == [""]

    def covers(self, layer: str) -> bool:
        """Whether the layer of this name is inside a part's graph (not in one of its leaves)."""
        return any(_within(layer, part) and not any(_within(layer, leaf) for leaf in self.leaves.get(part, []))
                   for part in self.parts)

    def note(self) -> str:
        """One line for the variant's notes (empty when the model was traced whole)."""
        if self.whole:
            return ""
        stops = "; ".join(f"{name or 'the model'}: {why}" for name, why in list(self.untraceable.items())[:3])
        more = f" (and {len(self.untraceable) - 3} more)" if len(self.untraceable) > 3 else ""
        return (f"torch.fx could not trace the whole model ({stops}{more}); quantized by parts: "
                f"{len(self.parts)} traced part(s) holding {self.layers[0]} of {self.layers[1]} Conv/Linear "
                "layers, the code between them in float")


def prepare_parts(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], prepare: Prepare) -> FxParts:
    """A copy of ``module`` prepared whole by ``prepare`` when FX traces it, else part by part
    (``module`` itself is left as it is). Raises what ``prepare`` raised when nothing can be traced.

    Every attempt prepares a fresh copy: a prepare changes the modules it reaches (QAT swaps them,
    torch.ao sets ``qconfig`` attributes on them) even when it fails or its graph is not kept, and
    a later attempt on those modules would inherit that (a stale ``qconfig = None`` failed
    a converter's next prepare with "Input float module must have a valid qconfig")."""
    try:
        whole = prepare(copy.deepcopy(module), example_inputs, [], "")
        return FxParts(whole, [""], layers=(len(layers(module)),) * 2)
    except Exception as error:
        if fx_failure(error) is None:
            raise
        whole_error = error
    module = copy.deepcopy(module)   # the working copy: its untraceable modules stay, parts go in
    calls, every_layer = _record_calls(module, example_inputs), layers(module)
    found = FxParts(module, [])
    found.module = _as_part(module, "", calls, prepare, found)
    found.layers = (sum(found.covers(layer) for layer in every_layer), len(every_layer))
    if not found.parts:
        raise whole_error
    return found


def convert_parts(found: FxParts, convert: Callable[[torch.fx.GraphModule], torch.nn.Module]) -> torch.nn.Module:
    """Every prepared graph converted by ``convert`` (innermost first); the model."""
    if found.whole:   # prepared graphs are GraphModules: the model when traced whole, else each part's
        return convert(cast("torch.fx.GraphModule", found.module))
    parts = _parts(found.module)
    for part in reversed(parts):   # innermost first: converting a graph also visits the parts inside it
        part.traced = convert(cast("torch.fx.GraphModule", part.traced))
    return found.module


def local_names(names: list[str], scope: str) -> list[str]:
    """The modules of ``names`` inside the part traced at ``scope``, named as in its graph."""
    if scope == "":
        return list(names)
    return [INNER + name[len(scope):] for name in names if _within(name, scope)]


def global_name(local: str, scope: str) -> str:
    """The model's name of module ``local`` of the graph traced at ``scope`` (``local_names`` inverted)."""
    return local if scope == "" else scope + local[len(INNER):]


def graphs(model: torch.nn.Module) -> list[tuple[str, torch.fx.GraphModule]]:
    """Each graph of a model prepared (or converted) by ``prepare_parts``, with the scope it was
    traced at: every part's, or the model itself at "" when FX traced it whole."""
    parts = _parts(model)
    found = [(part.part_name, part.traced) for part in parts] if parts else [("", model)]
    return cast("list[tuple[str, torch.fx.GraphModule]]", found)


@contextlib.contextmanager
def parts_running(model: torch.nn.Module,
                  runner: Callable[[str, torch.fx.GraphModule], Callable[..., object]]) -> Iterator[None]:
    """Inside the block, each part of ``model`` (prepared by parts) hands its graph's inputs to
    ``runner(scope, graph)`` instead of calling the graph, and the rest of the model runs as
    written: how an interpreter over the prepared graphs (``observers.one_layer_interpreter``)
    runs the whole model. The graphs are back in place afterwards."""
    import torch

    class Running(torch.nn.Module):
        def __init__(self, run: Callable[..., object]) -> None:
            super().__init__()
            self.run = run

        def forward(self, *args: torch.Tensor) -> object:
            return self.run(*args)

    parts = _parts(model)
    traced = [part.traced for part in parts]
    try:
        for part, graph in zip(parts, traced):
            part.traced = Running(runner(part.part_name, cast("torch.fx.GraphModule", graph)))
        yield
    finally:
        for part, graph in zip(parts, traced):
            part.traced = graph


@dataclass
class LayerCall:
    """Where a quantized layer sits in a prepared model: the graph traced at ``scope``, its module
    there, and that graph's nodes calling it."""

    scope: str
    graph: torch.fx.GraphModule
    module: torch.nn.Module
    nodes: list[Any]  # torch.fx.Node (a call_module node's target is a str)


def called_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Every module a graph of ``model`` (whole, or each part) calls, by the model's module path."""
    return {global_name(node.target, scope): graph.get_submodule(node.target)
            for scope, graph in graphs(model) for node in graph.graph.nodes if node.op == "call_module"}


def quantized_layers(prepared: torch.nn.Module) -> dict[str, LayerCall]:
    """The Conv and Linear layers (fused ones too) a prepared model will quantize, by module path."""
    import torch
    from torch.ao.nn.intrinsic import _FusedModule

    kinds = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)
    found: dict[str, LayerCall] = {}
    for scope, graph in graphs(prepared):
        for node in graph.graph.nodes:
            module = graph.get_submodule(node.target) if node.op == "call_module" else None
            inner = module[0] if isinstance(module, _FusedModule) else module
            if isinstance(inner, kinds) and getattr(module, "qconfig", None) is not None:
                name = global_name(node.target, scope)
                layer = cast(torch.nn.Module, module)  # not None: inner is a layer
                found.setdefault(name, LayerCall(scope, graph, layer, [])).nodes.append(node)
    return found


def graph_code(module: torch.nn.Module) -> str:
    """The code of every FX graph in ``module``: what fixes where observers sit (cache keys)."""
    import torch

    return "\n".join(m.code for m in module.modules() if isinstance(m, torch.fx.GraphModule))


@dataclass
class _Call:
    """How the model called a module: positional and keyword arguments, which of them are tensors."""

    args: tuple[object, ...]
    kwargs: dict[str, object]
    output_spec: TreeSpec | None = None   # once the module returned

    def tensor_slots(self) -> list[int | str]:
        import torch

        return ([i for i, a in enumerate(self.args) if isinstance(a, torch.Tensor)]
                + [k for k, v in self.kwargs.items() if isinstance(v, torch.Tensor)])

    def traceable(self) -> bool:
        """Only tensors and plain constants: a tensor inside a list or tuple cannot be fixed."""
        import torch

        def plain(value: object) -> bool:
            if isinstance(value, (list, tuple, dict)):
                items = value.values() if isinstance(value, dict) else value
                return all(plain(v) and not isinstance(v, torch.Tensor) for v in items)
            return True

        return all(plain(v) for v in [*self.args, *self.kwargs.values()])


def _prepare_children(module: torch.nn.Module, name: str, calls: dict[str, _Call], prepare: Prepare,
                      found: FxParts) -> None:
    """Each child of ``module`` (which FX cannot trace) as a part, or its children in turn."""
    for child_name, child in list(module.named_children()):
        setattr(module, child_name, _as_part(child, _join(name, child_name), calls, prepare, found))


def _as_part(module: torch.nn.Module, name: str, calls: dict[str, _Call], prepare: Prepare,
             found: FxParts) -> torch.nn.Module:
    """``module`` as a prepared Part when FX traces it (its untraceable submodules left as calls and
    made parts in turn); else ``module`` with its children handled so; unchanged without layers."""
    call = calls.get(name)
    if not layers(module) or call is None:
        return module
    leaves: list[str] = []
    graph: torch.fx.GraphModule | None = None
    while call.traceable():
        attempt = _bound(copy.deepcopy(module), call)   # ``module`` itself stays as it was (prepare_parts)
        try:
            graph = prepare(attempt, tuple(_slot_values(call)), [f"{INNER}.{leaf}" for leaf in leaves], name)
            break
        except Exception as error:
            why = fx_failure(error)
            if why is None:
                raise
            culprit = _innermost_module(error, getattr(attempt, INNER))
            if culprit in (None, "") or culprit in leaves:
                found.untraceable[name] = why
                break
            leaves.append(culprit)
    if graph is None or not layers(module, leaves):   # nothing of its own to quantize: its children may have
        _prepare_children(module, name, calls, prepare, found)
        return module
    found.parts.append(name)
    found.leaves[name] = [_join(name, leaf) for leaf in leaves]
    for leaf in _outermost(leaves):   # the graph calls its leaves: the untouched originals, made parts in turn
        parent_name, _, attr = f"{INNER}.{leaf}".rpartition(".")
        part = _as_part(module.get_submodule(leaf), _join(name, leaf), calls, prepare, found)
        setattr(graph.get_submodule(parent_name), attr, part)
    return _part_class()(graph, call, name)


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


def _record_calls(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> dict[str, _Call]:
    """Every submodule's first call (arguments and output structure) on the example inputs."""
    import torch
    from torch.utils import _pytree as pytree

    calls: dict[str, _Call] = {}
    hooks = []
    for name, sub in module.named_modules():
        def before(_: torch.nn.Module, args: tuple, kwargs: dict, name: str = name) -> None:
            calls.setdefault(name, _Call(args, dict(kwargs)))

        def after(_: torch.nn.Module, args: tuple, kwargs: dict, out: object, name: str = name) -> None:
            if calls[name].output_spec is None:
                calls[name].output_spec = pytree.tree_structure(out)

        hooks += [sub.register_forward_pre_hook(before, with_kwargs=True),
                  sub.register_forward_hook(after, with_kwargs=True)]
    try:
        with torch.no_grad():
            module(*example_inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return calls


def _slot_values(call: _Call, args: tuple[object, ...] | None = None,
                 kwargs: dict[str, object] | None = None) -> list[torch.Tensor]:
    args, kwargs = (call.args, call.kwargs) if args is None else (args, kwargs or {})
    values = [args[slot] if isinstance(slot, int) else kwargs[slot] for slot in call.tensor_slots()]
    return cast("list[torch.Tensor]", values)   # tensor_slots: the slots that hold tensors


def _bound(module: torch.nn.Module, call: _Call) -> torch.nn.Module:
    """A module whose forward takes only the call's tensors, in slot order, and calls ``module``
    exactly as the model did with them (FX traces it with every other argument a constant)."""
    import torch

    slots = call.tensor_slots()
    params = ", ".join(f"t{i}" for i in range(len(slots)))
    namespace: dict[str, object] = {}
    # FX names a graph's inputs from forward's code object, so forward is written with one named
    # parameter per tensor (t0, t1, ...: made here, nothing of the model's is executed).
    exec(f"def forward(self, {params}):\n    return self.call_inner(({params}{',' if slots else ''}))", namespace)

    def call_inner(self: torch.nn.Module, tensors: tuple[torch.Tensor, ...]) -> object:
        args, kwargs = list(call.args), dict(call.kwargs)
        for slot, tensor in zip(slots, tensors):
            if isinstance(slot, int):
                args[slot] = tensor
            else:
                kwargs[slot] = tensor
        return getattr(self, INNER)(*args, **kwargs)

    bound = type("Bound", (torch.nn.Module,), {"forward": namespace["forward"], "call_inner": call_inner})()
    setattr(bound, INNER, module)
    return bound.train(module.training)


class _Part(Protocol):
    """What ``_part_class()`` makes, as the functions here use it."""

    traced: torch.nn.Module
    call: _Call
    part_name: str


def _parts(model: torch.nn.Module) -> list[_Part]:
    """The Part modules inside ``model`` (prepared or converted by parts), outermost first."""
    return [cast(_Part, m) for m in model.modules() if isinstance(m, _part_class())]


@functools.cache
def _part_class() -> type[torch.nn.Module]:
    """The Part module class (made on first use: importing this file needs no torch)."""
    import torch
    from torch.utils import _pytree as pytree

    class Part(torch.nn.Module):
        """A traced (prepared, later converted) graph in the place of the module it was traced from. Its
        graph is ``traced``, not ``graph``: a scripted module has a ``graph`` of its own."""

        def __init__(self, graph: torch.nn.Module, call: _Call, name: str) -> None:
            super().__init__()
            self.traced, self.call, self.part_name = graph, call, name

        def forward(self, *args: object, **kwargs: object) -> object:
            self._check(args, kwargs)
            out = self.traced(*_slot_values(self.call, args, kwargs))
            return pytree.tree_unflatten(pytree.tree_leaves(out), cast("TreeSpec", self.call.output_spec))

        def _check(self, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
            same = (len(args) == len(self.call.args) and kwargs.keys() == self.call.kwargs.keys()
                    and all(_same_constant(a, b) for a, b in zip(args, self.call.args))
                    and all(_same_constant(kwargs[k], v) for k, v in self.call.kwargs.items()))
            if not same:
                raise LoweringError(f"{self.part_name} was traced by torch.fx for the arguments the model gave it "
                                    "on the example inputs and is now called with others; it cannot be "
                                    "quantized by parts")

    return Part


def _same_constant(given: object, traced: object) -> bool:
    """Equal, or both tensors (a tensor is a graph input, whatever its value)."""
    import torch

    if isinstance(given, torch.Tensor) or isinstance(traced, torch.Tensor):
        return isinstance(given, torch.Tensor) and isinstance(traced, torch.Tensor)
    try:
        return bool(given == traced) and type(given) is type(traced)
    except Exception:
        return given is traced


def _innermost_module(error: BaseException, module: torch.nn.Module) -> str | None:
    """The name inside ``module`` of the innermost submodule whose own code was running when
    ``error`` was raised ("" for ``module`` itself; None when none of them was)."""
    names = {id(m): n for n, m in module.named_modules()}
    found, tb = None, error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if id(owner) in names and owner is not None:
            found = names[id(owner)]
        tb = tb.tb_next
    return found


def layers(module: torch.nn.Module, leaves: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The names of the Conv and Linear layers of ``module`` outside ``leaves`` (what an FX
    quantizer quantizes)."""
    import torch

    kinds = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)
    return [name for name, m in module.named_modules()
            if isinstance(m, kinds) and not any(_within(name, leaf) for leaf in leaves)]


def _outermost(names: list[str]) -> list[str]:
    """``names`` without those inside another of them (an inner leaf is reached through its parent)."""
    return [n for n in names if not any(n.startswith(other + ".") for other in names if other != n)]


def _within(name: str, scope: str) -> bool:
    """Whether module ``name`` is ``scope`` or inside it ("" is the whole model)."""
    return scope == "" or name == scope or name.startswith(scope + ".")
