"""Calibration for PyTorch's quantizers (FX graph mode and PT2E): run samples through the
observers a prepared model carries, and cache what they saw.

Both flows insert observer modules named ``activation_post_process_N``; after calibration their
state (min/max, histograms) is all that convert needs. That state is what the cache keeps, keyed
by the prepared graph's code (which also fixes where observers sit and which layers stay float),
the weights, the samples and the quantization settings. On a hit the same prepared model is
built again and the observers' state loaded: no sample is run.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from edgeship.cache import Cache
from edgeship.calibration import Dataset
from edgeship.quantize.fx_parts import graph_code
from edgeship.quantize.quantized import calibrated

OBSERVERS_FILE = "observers.pt"
CALIBRATION_BATCH = 32


def observers(prepared: Any) -> dict[str, Any]:
    """The observer modules of a prepared model, by name."""
    return {name: m for name, m in prepared.named_modules()
            if name.rsplit(".", 1)[-1].startswith("activation_post_process") and hasattr(m, "calculate_qparams")}


def run_samples(module: Any, data: Dataset, batch: int, flexible: bool = False) -> None:
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


def takes_any_batch(module: Any, example: tuple[Any, ...]) -> bool:
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


def calibrate_observers(prepared: Any, data: Dataset, batch: int, cache: Cache | None,
                        key_parts: dict[str, Any], flexible: bool = False) -> dict[str, Any]:
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
        if entry.hit:
            states = torch.load(entry.path / OBSERVERS_FILE, weights_only=True)
            for name, module in observers(prepared).items():
                module.load_state_dict(states[name])
    return facts
