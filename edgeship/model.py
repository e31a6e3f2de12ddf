"""ModelSpec -> float module, example inputs and facts about the model; weights loaded safely.

Checkpoints are read with ``torch.load(weights_only=True)``: a file that needs arbitrary
unpickling (and could run code) is refused unless the user passes ``--trust-weights``.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeship.devices.hashing import sha256_file  # one implementation, also used on devices
from edgeship.entry import import_entry, importable
from edgeship.errors import ModelSpecError, WeightsError, first_line
from edgeship.spec import ModelSpec

WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "net", "module", "ema")
TORCH_DTYPES = {"float32": "float32", "float16": "float16", "int64": "int64", "int32": "int32",
                "uint8": "uint8", "bool": "bool"}


@dataclass
class LoadedModel:
    """The float model ready to capture: module in eval mode plus what we know about it."""

    spec: ModelSpec
    module: Any                      # torch.nn.Module
    example_inputs: tuple[Any, ...]  # torch tensors, one per input, batch as in the spec
    weights_sha256: str | None
    params: int
    notes: list[str] = field(default_factory=list)


def build_module(spec: ModelSpec) -> Any:
    """Call the spec's entry and check that it returns an nn.Module."""
    import torch

    factory: Any = import_entry(spec.entry, spec.base_dir, ModelSpecError, f"{spec.source or 'model spec'}: entry")
    try:
        module = factory(**spec.entry_kwargs)
    except Exception as e:
        raise ModelSpecError(f"{spec.source or 'model spec'}: entry {spec.entry} raised "
                             f"{type(e).__name__}: {first_line(e)}") from None
    if not isinstance(module, torch.nn.Module):
        raise ModelSpecError(f"{spec.source or 'model spec'}: entry {spec.entry} returned "
                             f"{type(module).__name__}, expected a torch.nn.Module")
    return module


def read_checkpoint(path: Path, trust: bool = False) -> dict[str, Any]:
    """A state_dict from a checkpoint file; refuses code-carrying pickles unless ``trust``."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as e:
        raise WeightsError(
            f"{path}: refused: this checkpoint needs arbitrary unpickling, which can run code "
            f"({first_line(e).removeprefix('Weights only load failed. ')[:160]}). edgeship loads "
            "weights with torch.load(weights_only=True). Save a plain state_dict "
            "(torch.save(model.state_dict(), path)), or, if you trust where the file came from, "
            "pass --trust-weights.") from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise WeightsError(f"{path}: not a readable torch checkpoint: {first_line(e)}") from None
    return unwrap_state_dict(obj, path)


def unwrap_state_dict(obj: Any, path: Path) -> dict[str, Any]:
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


def _is_state_dict(obj: dict[str, Any]) -> bool:
    import torch

    return bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def apply_weights(module: Any, state: dict[str, Any], path: Path) -> None:
    """Load ``state`` strictly; missing, unexpected or misshapen keys are listed in one error."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshapen = sorted(k for k in set(expected) & set(state)
                       if tuple(expected[k].shape) != tuple(state[k].shape))
    if missing or unexpected or misshapen:
        parts = []
        if missing:
            parts.append(f"missing keys: {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected keys: {_listing(unexpected)}")
        if misshapen:
            parts.append("shape mismatches: " + _listing(
                [f"{k} {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}" for k in misshapen]))
        raise WeightsError(f"{path}: does not fit the model: " + "; ".join(parts))
    module.load_state_dict(state, strict=True)


def example_inputs(spec: ModelSpec, seed: int = 0) -> tuple[Any, ...]:
    """Seeded example inputs of the spec's shapes and dtypes."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for inp in spec.inputs:
        dtype = getattr(torch, TORCH_DTYPES[inp.dtype])
        if dtype.is_floating_point:
            out.append(torch.rand(inp.shape, generator=gen).to(dtype))
        else:
            out.append(torch.zeros(inp.shape, dtype=dtype))
    return tuple(out)


def load_model(spec: ModelSpec, trust_weights: bool = False) -> LoadedModel:
    """Build the module, load its weights safely, and put it in eval mode."""
    # The factory, and a trusted checkpoint's pickled classes, may import the spec's other modules.
    with importable(spec.base_dir):
        module = build_module(spec)
        if spec.weights is not None:
            apply_weights(module, read_checkpoint(spec.weights, trust_weights), spec.weights)
    sha = sha256_file(spec.weights) if spec.weights is not None else None
    module.eval()
    params = sum(p.numel() for p in module.parameters())
    return LoadedModel(spec=spec, module=module, example_inputs=example_inputs(spec),
                       weights_sha256=sha, params=params)


def count_flops(module: Any, inputs: tuple[Any, ...]) -> int | None:
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


def _listing(items: list[str], limit: int = 12) -> str:
    more = f" ... and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


class LazyModel:
    """The float model, loaded on first use: a build whose stages all come from the stage cache
    never imports torch. ``counts`` (params, flops) may come from the cache as well."""

    def __init__(self, spec: ModelSpec, trust_weights: bool = False) -> None:
        self.spec = spec
        self.trust_weights = trust_weights
        self.counts: dict[str, Any] = {}
        self._loaded: LoadedModel | None = None

    @property
    def loaded(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = load_model(self.spec, self.trust_weights)
        return self._loaded

    @property
    def module(self) -> Any:
        return self.loaded.module

    @property
    def example_inputs(self) -> tuple[Any, ...]:
        return self.loaded.example_inputs

    @property
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
