"""ModelSpec -> float module, example inputs and facts about the model; weights loaded safely.

Checkpoints are read with ``torch.load(weights_only=True)``: a file that needs arbitrary
unpickling (and could run code) is refused unless the user passes ``--trust-weights``.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import pickle
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from edgeship.devices.hashing import sha256_file  # one implementation, also used on devices
from edgeship.entry import import_entry, importable
from edgeship.errors import ModelSpecError, WeightsError, first_line, listing
from edgeship.spec import ModelSpec

if TYPE_CHECKING:
    import torch

WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "net", "module", "ema")
TORCH_DTYPES = {"float32": "float32", "float16": "float16", "int64": "int64", "int32": "int32",
                "uint8": "uint8", "bool": "bool"}


@dataclass
class LoadedModel:
    """The float model ready to capture: module in eval mode plus what we know about it."""

    spec: ModelSpec
    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]  # one per input, batch as in the spec
    params: int
    notes: list[str] = field(default_factory=list)

    @functools.cached_property
    def weights_sha256(self) -> str | None:
        """sha256 of the weights file, read when asked (the eager runner's timed load never pays for it)."""
        return sha256_file(self.spec.weights) if self.spec.weights is not None else None

    @functools.cached_property
    def state_sha256(self) -> str:
        """sha256 of the built module's state_dict: the weights' identity, for cache keys and checks."""
        return state_sha256(self.module)


def build_module(spec: ModelSpec) -> torch.nn.Module:
    """Call the spec's entry and check that it returns an nn.Module."""
    import torch

    factory = cast("Callable[..., object]",
                   import_entry(spec.entry, spec.base_dir, ModelSpecError, f"{spec.source or 'model spec'}: entry"))
    try:
        with seeded(spec.seed):  # random initialisation is the same in every process and build
            module = factory(**spec.entry_kwargs)
    except Exception as e:
        raise ModelSpecError(f"{spec.source or 'model spec'}: entry {spec.entry} raised "
                             f"{type(e).__name__}: {first_line(e)}") from None
    if not isinstance(module, torch.nn.Module):
        raise ModelSpecError(f"{spec.source or 'model spec'}: entry {spec.entry} returned "
                             f"{type(module).__name__}, expected a torch.nn.Module")
    check_forward(module, spec)
    return module


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch, numpy and random seeded with ``seed`` inside; their previous states restored after."""
    import random

    import numpy as np
    import torch

    saved = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            random.setstate(saved[0])
            np.random.set_state(saved[1])


def state_sha256(module: torch.nn.Module) -> str:
    """sha256 of the module's state_dict (names, dtypes, shapes, values): which weights were built."""
    import torch

    h = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        if not isinstance(value, torch.Tensor):
            h.update(f"{name}:{value!r};".encode())
            continue
        t = value.detach().cpu()
        t = t.int_repr() if t.is_quantized else t
        h.update(f"{name}:{t.dtype}:{list(t.shape)};".encode())
        try:
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
        except (RuntimeError, TypeError):  # sparse and other layouts without flat bytes
            h.update(repr(t.tolist()).encode())
    return h.hexdigest()


def check_forward(module: torch.nn.Module, spec: ModelSpec) -> None:
    """ModelSpecError when ``module.forward`` cannot take the spec's inputs, one per positional
    argument (too few, too many, or a keyword-only argument without a default)."""
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):  # a forward inspect cannot read: its first call will tell
        return
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    keyword_only = [p for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    n = len(spec.inputs)
    if n < len(required) or (n > len(positional) and not varargs) or keyword_only:
        raise ModelSpecError(f"{spec.source or 'model spec'}: {_inputs_text(spec)}, but "
                             f"{_forward_text(module)} takes {_arity(required, positional, varargs)}"
                             + (f" and needs keyword argument(s) {', '.join(p.name for p in keyword_only)}"
                                if keyword_only else "")
                             + "; the spec's inputs are passed to forward in order")


def _arity(required: list[inspect.Parameter], positional: list[inspect.Parameter], varargs: bool) -> str:
    if varargs:
        return f"at least {len(required)} input(s)"
    if len(required) == len(positional):
        return f"{len(positional)} input(s)"
    return f"{len(required)} to {len(positional)} inputs"


def _inputs_text(spec: ModelSpec) -> str:
    return f"the spec has {len(spec.inputs)} input(s) ({', '.join(i.name for i in spec.inputs)})"


def _forward_text(module: torch.nn.Module) -> str:
    """``TinyNet.forward(x)``: the signature without annotations."""
    try:
        sig = inspect.signature(module.forward)
        sig = sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                          return_annotation=sig.empty)
    except (TypeError, ValueError):
        return f"{type(module).__name__}.forward"
    return f"{type(module).__name__}.forward{sig}"


def call_model(module: torch.nn.Module, inputs: dict[str, torch.Tensor], source: str = "model spec") -> object:
    """``module(*inputs)``; whatever the model raises on the spec's inputs is a ModelSpecError
    naming the spec (``source``), the inputs (name, shape, dtype) and forward's signature."""
    try:
        return module(*inputs.values())
    except Exception as e:
        given = ", ".join(f"{name} {list(t.shape)} {str(t.dtype).removeprefix('torch.')}" for name, t in inputs.items())
        raise ModelSpecError(f"{source or 'model spec'}: the model raised {type(e).__name__} on the spec's "
                             f"inputs ({given}): {first_line(e)[:300]}; check the spec's inputs (in order) against "
                             f"{_forward_text(module)}") from e


def read_checkpoint(path: Path, trust: bool = False) -> dict[str, torch.Tensor]:
    """A state_dict from a checkpoint file; refuses code-carrying pickles unless ``trust``."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as e:
        blocked = None if trust else blocked_global(str(e))
        if blocked is not None:
            raise WeightsError(
                f"{path}: refused: it needs {blocked}, which torch.load(weights_only=True) does not allow: "
                "unpickling it could run code. Save a plain state_dict "
                "(torch.save(model.state_dict(), path)), or, if you trust where the file came from, "
                "pass --trust-weights.") from None
        raise WeightsError(f"{path}: not a torch checkpoint torch.load can read: {unpickler_reason(e)}") from None
    except Exception as e:  # torch.load raises whatever its readers do: RuntimeError, EOFError, KeyError, ...
        reason = first_line(e)[:300]
        raise WeightsError(f"{path}: not a torch checkpoint torch.load can read: {type(e).__name__}"
                           + ("" if reason == type(e).__name__ else f": {reason}")) from None
    return unwrap_state_dict(obj, path)


BLOCKED = {"global": r"GLOBAL (\S+) (?:was not an allowed global|whose module)",
           "function": r"call reduce for unrecognized function (.+?)(?: which belongs|$)",
           "class": r"classes allowlisted via `add_safe_globals` but got (.+)$",
           "type": r"``([\w.]+)`` must be imported to load"}


def blocked_global(message: str) -> str | None:
    """What torch's weights_only unpickler refused to load, from its message (``global posix.system``),
    or None when it stopped for another reason (bytes that are not a checkpoint)."""
    for kind, pattern in BLOCKED.items():
        found = re.search(pattern, message, re.MULTILINE)
        if found:
            return f"{kind} {found.group(1).strip()}"
    return None


def unpickler_reason(error: BaseException) -> str:
    """The unpickler's own reason from torch's long weights_only message (its last line before the
    pointer to the documentation), e.g. ``Unsupported operand 66`` or ``pickle data was truncated``."""
    text = str(error).split("Check the documentation of torch.load")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1].removeprefix("WeightsUnpickler error: ")[:300] if lines else type(error).__name__


def unwrap_state_dict(obj: object, path: Path) -> dict[str, torch.Tensor]:
    """Find the state_dict in a bare dict, a common wrapper, or (trusted) a pickled module."""
    import torch

    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if not isinstance(obj, dict):
        raise WeightsError(f"{path}: holds a {type(obj).__name__}, expected a state_dict "
                           f"(a dict of tensors) or a dict with one of: {', '.join(WRAPPER_KEYS)}")
    if _is_state_dict(obj):
        if all(str(k).startswith("module.") for k in obj):  # saved from DataParallel / DDP
            obj = {str(k)[len("module."):]: v for k, v in obj.items()}
        return obj
    for key in WRAPPER_KEYS:
        if isinstance(obj.get(key), (dict, torch.nn.Module)):
            return unwrap_state_dict(obj[key], path)
    raise WeightsError(f"{path}: no state_dict found: the top-level keys are "
                       f"{', '.join(map(str, list(obj)[:10]))}; expected tensors or one of: "
                       f"{', '.join(WRAPPER_KEYS)}")


def _is_state_dict(obj: dict[Any, object]) -> bool:
    import torch

    return bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def apply_weights(module: torch.nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    """Load ``state`` strictly; missing, unexpected or misshapen keys are listed in one error."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshapen = sorted(k for k in set(expected) & set(state)
                       if tuple(expected[k].shape) != tuple(state[k].shape))
    if missing or unexpected or misshapen:
        parts = []
        if missing:
            parts.append(f"missing keys: {listing(missing, 12)}")
        if unexpected:
            parts.append(f"unexpected keys: {listing(unexpected, 12)}")
        if misshapen:
            parts.append("shape mismatches: " + listing(
                [f"{k} {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}" for k in misshapen], 12))
        raise WeightsError(f"{path}: does not fit the model: " + "; ".join(parts))
    module.load_state_dict(state, strict=True)


def example_inputs(spec: ModelSpec, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Seeded example inputs of the spec's dtypes, at the "opt" size (the shapes as written, unless
    a dynamic dimension sets another opt), with values in each input's ``range`` (unset: floats in
    [0, 1), integers 0)."""
    import torch

    from edgeship.shapes import shape_at

    gen = torch.Generator().manual_seed(seed)
    out = []
    for inp in spec.inputs:
        dtype, shape = getattr(torch, TORCH_DTYPES[inp.dtype]), shape_at(inp, "opt")
        if dtype.is_floating_point:
            low, high = inp.range or (0, 1)
            out.append((low + (high - low) * torch.rand(shape, generator=gen)).to(dtype))
        elif inp.range is not None:  # torch.randint's bounds are int64: int64's own top value is left out
            low, high = int(inp.range[0]), min(int(inp.range[1]), 2**63 - 1)
            out.append(torch.randint(low, high, shape, generator=gen).to(dtype))
        else:
            out.append(torch.zeros(shape, dtype=dtype))
    return tuple(out)


def load_model(spec: ModelSpec, trust_weights: bool = False) -> LoadedModel:
    """Build the module, load its weights safely, and put it in eval mode."""
    # The factory, and a trusted checkpoint's pickled classes, may import the spec's other modules.
    with importable(spec.base_dir):
        module = build_module(spec)
        if spec.weights is not None:
            apply_weights(module, read_checkpoint(spec.weights, trust_weights), spec.weights)
    module.eval()
    params = sum(p.numel() for p in module.parameters())
    return LoadedModel(spec=spec, module=module, example_inputs=example_inputs(spec),
                       params=params)


def count_flops(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int | None:
    """Forward FLOPs from torch.utils.flop_counter, or None where it cannot count."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    # The fused attention fast path (nn.TransformerEncoder in eval) is invisible to the counter.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    try:
        torch.backends.mha.set_fastpath_enabled(False)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(*inputs)
        return int(counter.get_total_flops())
    except Exception:  # counting is informative only; a model it cannot follow gets null
        return None
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


class Counts(TypedDict, total=False):
    """What LazyModel counted (or the stage cache recorded): parameters and forward FLOPs."""

    params: int
    flops: int | None


class LazyModel:
    """The float model, loaded on first use: a build whose stages all come from the stage cache
    never imports torch. ``counts`` (params, flops) may come from the cache as well."""

    def __init__(self, spec: ModelSpec, trust_weights: bool = False) -> None:
        self.spec = spec
        self.trust_weights = trust_weights
        self.counts: Counts = {}
        self._loaded: LoadedModel | None = None
        self.expected_state: str | None = None

    @property
    def loaded(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = load_model(self.spec, self.trust_weights)
            self._check_state()
        return self._loaded

    @property
    def state_sha256(self) -> str:
        """sha256 of the built module's state_dict (loads the model)."""
        return self.loaded.state_sha256

    def expect_state(self, sha: str | None) -> None:
        """The state_dict sha256 the stage cache's float reference was made from: the model, when
        this build loads it, must be the same (ModelSpecError otherwise)."""
        self.expected_state = sha
        if self._loaded is not None:
            self._check_state()

    def _check_state(self) -> None:
        if self.expected_state is None or self.state_sha256 == self.expected_state:
            return
        raise ModelSpecError(
            f"{self.spec.source or self.spec.entry}: the model built now (state_dict sha256 {self.state_sha256[:12]}) "
            f"differs from the one the stage cache's float reference was computed from "
            f"({self.expected_state[:12]}), although the spec, seed, weights and entry module are the same: the "
            f"entry builds different weights each time (randomness the seed {self.spec.seed} does not cover), or "
            "a module it imports changed. Give a weights file, or run `edgeship cache clear`.")

    @property
    def module(self) -> torch.nn.Module:
        return self.loaded.module

    @property
    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        return self.loaded.example_inputs

    @functools.cached_property
    def weights_sha256(self) -> str | None:
        return sha256_file(self.spec.weights) if self.spec.weights else None

    @property
    def params(self) -> int:
        if "params" not in self.counts:
            self.counts["params"] = self.loaded.params
        return self.counts["params"]

    @property
    def flops(self) -> int | None:
        if "flops" not in self.counts:
            self.counts["flops"] = count_flops(self.module, self.example_inputs)
        return self.counts["flops"]
