"""Check that the zoo's random-weight models are fit to judge artifacts by: each builds the same
weights in two processes, and its outputs are finite, not all zero and differ from input to input.

    .venv/bin/python examples/zoo/check.py [--models resnet18,bert-tiny]

Each model is built twice, each time in a fresh process, as ``edgeship build`` builds it (the
spec's seed, entry and entry_kwargs), and run on the inputs a build evaluates: the spec's
evaluation data, else 8 of edgeship's seeded random inputs. Printed per model: the state_dict
sha256 of both builds, the output's mean magnitude, the share of exact zeros, the spread (mean
standard deviation across samples over the overall standard deviation: 0 when every input gives
the same output) and, for class scores, how many distinct classes the samples' argmax picks
(with one class for every input, top-1 agreement would prove nothing). Exit 1 when a model fails.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SAMPLES = 8
MIN_SPREAD = 0.05


def spec_paths() -> dict[str, Path]:
    """Every zoo spec built from this repository's examples, by model name."""
    import tomllib

    paths = sorted(HERE.glob("*.toml")) + sorted((REPO / "examples" / "transformers").glob("*.toml"))
    return {tomllib.loads(p.read_text())["name"]: p for p in paths}


def measure(path: Path) -> dict:
    """Build the model as a build does and describe its outputs on the evaluation inputs."""
    import numpy as np
    import torch

    from edgeship.calibration import load_dataset, random_dataset
    from edgeship.model import load_model
    from edgeship.outputs import flatten
    from edgeship.spec import load_spec

    spec = load_spec(path)
    model = load_model(spec)
    data = (load_dataset(spec.data.evaluation, spec, "evaluation").take(SAMPLES) if spec.data.evaluation
            else random_dataset(spec, SAMPLES))
    names = {"segmentation": spec.segmentation, "embedding": spec.embedding}
    wanted = getattr(names.get(spec.task), "output", None)
    outs = []
    with torch.no_grad():
        for batch in data.batches(int(spec.inputs[0].shape[0])):
            pairs = flatten(model.module(*[torch.from_numpy(a) for a in batch.values()]))
            outs.append(dict(pairs).get(wanted, pairs[0][1]).float().numpy())
    out = np.concatenate(outs)
    return {"sha256": model.state_sha256, "params": model.params, "shape": list(out.shape), **describe(out, spec.task)}


def describe(out, task: str) -> dict:
    """Magnitude, zeros, spread across samples and (class scores) distinct argmax classes."""
    import numpy as np

    finite = bool(np.isfinite(out).all())
    overall = float(out.std()) if finite else 0.0
    spread = float(out.std(axis=0).mean() / overall) if overall > 0 else 0.0
    facts = {"finite": finite, "abs_mean": float(np.abs(out).mean()) if finite else None,
             "zeros": float((out == 0).mean()), "spread": spread}
    if task in ("classification", "segmentation") and out.ndim >= 2:
        facts["classes"] = int(len(np.unique(out.argmax(axis=1))))
    return facts


def verdict(first: dict, second: dict) -> list[str]:
    """What makes the model unfit, if anything."""
    problems = []
    if first["sha256"] != second["sha256"]:
        problems.append("different weights in two processes")
    if not first["finite"]:
        problems.append("non-finite outputs")
    if first["zeros"] == 1.0:
        problems.append("all-zero outputs")
    if first["spread"] < MIN_SPREAD:
        problems.append(f"outputs barely change with the input (spread {first['spread']:.3f} < {MIN_SPREAD})")
    if first.get("classes") == 1:
        problems.append("one argmax class for every input")
    return problems


def run_one(path: Path) -> dict:
    """``measure`` in a fresh process (so the two builds share nothing)."""
    proc = subprocess.run([sys.executable, __file__, "--one", str(path)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        sys.path.insert(0, str(REPO))
        print(json.dumps(measure(args.one)))
        return 0
    specs = spec_paths()
    chosen = args.models.split(",") if args.models else list(specs)
    failed = 0
    for name in chosen:
        first, second = run_one(specs[name]), run_one(specs[name])
        if "error" in first or "error" in second:
            print(f"{name:30} ERROR {first.get('error') or second.get('error')}")
            failed += 1
            continue
        problems = verdict(first, second)
        failed += bool(problems)
        print(f"{name:30} {first['sha256'][:12]} = {second['sha256'][:12]}  params {first['params']:>10,}  "
              f"out {first['shape']}  |out| {first['abs_mean']:.3g}  zeros {first['zeros']:.2f}  "
              f"spread {first['spread']:.2f}  classes {first.get('classes', '-')}  "
              + ("; ".join(problems) if problems else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
