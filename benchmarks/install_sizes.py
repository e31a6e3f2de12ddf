"""What each install of edgeship takes on disk, torch aside: measured from a venv's installed files.

    python benchmarks/install_sizes.py VENV [VENV ...] [--write]

For each venv: its site-packages in all; torch's build (torch, torchvision and every distribution they
require, which any venv of edgeship holds alike; here a CUDA build of torch, most of any venv); the
rest. For each extra of edgeship found installed in a venv: what it adds beyond the core package
(the distributions its requirements reach that the core's do not). Sizes are the files each
distribution's RECORD lists, as they are on disk. ``--write`` also writes
benchmarks/results/install_sizes.json (each venv by its folder's name), which docs/install.md quotes.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import datetime, timezone
from importlib.metadata import Distribution, distributions
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

RESULTS = Path(__file__).resolve().parent / "results" / "install_sizes.json"
TORCH = ("torch", "torchvision")
MIB = 1 << 20


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        sys.exit(f"{venv}: no lib/python3*/site-packages (not a venv?)")
    return found[0]


def dist_bytes(dist: Distribution) -> int:
    """The bytes of the files ``dist``'s RECORD lists (those still there)."""
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def requires(dist: Distribution, extras: tuple[str, ...] = ()) -> list[Requirement]:
    """``dist``'s requirements that apply here, with those of ``extras``."""
    found = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate(default_environment() | {"extra": e}) for e in ("", *extras)):
            found.append(req)
    return found


def extra_names(edgeship: Distribution, extra: str) -> set[str]:
    """The distributions edgeship's ``extra`` names itself, those of the extras it names included."""
    core = {str(r) for r in requires(edgeship)}
    names: set[str] = set()
    for req in requires(edgeship, (extra,)):
        if str(req) in core:
            continue
        if canonicalize_name(req.name) == "edgeship":
            names |= set().union(*(extra_names(edgeship, e) for e in req.extras))
        else:
            names.add(canonicalize_name(req.name))
    return names


def closure(dists: dict[str, Distribution], start: list[Requirement]) -> set[str]:
    """The installed distributions ``start`` reaches through requirements (extras followed)."""
    seen: set[str] = set()
    pending = list(start)
    while pending:
        req = pending.pop()
        name = canonicalize_name(req.name)
        if name not in dists or (name in seen and not req.extras):
            continue
        seen.add(name)
        pending += requires(dists[name], tuple(req.extras))
    return seen


def measure(venv: Path) -> dict:
    root = site_packages(venv)
    dists = {canonicalize_name(d.metadata["Name"]): d for d in distributions(path=[str(root)])}
    sizes = {name: dist_bytes(d) for name, d in dists.items()}
    torch = closure(dists, [Requirement(n) for n in TORCH])
    core = closure(dists, [Requirement("edgeship")]) if "edgeship" in dists else set()
    out = {"venv": venv.name, "python": root.parent.name, "site_packages_mib": round(sum(sizes.values()) / MIB),
           "torch_build_mib": round(sum(sizes[n] for n in torch) / MIB),
           "rest_mib": round(sum(v for n, v in sizes.items() if n not in torch) / MIB),
           "core_mib": round(sum(sizes[n] for n in core - torch) / MIB), "extras_mib": {}}
    if "edgeship" in dists:
        for extra in dists["edgeship"].metadata.get_all("Provides-Extra") or []:
            if extra_names(dists["edgeship"], extra) <= set(dists):  # installed: every distribution it names
                reached = closure(dists, [Requirement(f"edgeship[{extra}]")]) - core - torch
                out["extras_mib"][extra] = round(sum(sizes[n] for n in reached) / MIB)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venvs", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true", help=f"also write {RESULTS}")
    args = parser.parse_args()
    rows = [measure(v) for v in args.venvs]
    for row in rows:
        extras = ", ".join(f"[{k}] {v}" for k, v in row["extras_mib"].items())
        print(f"{row['venv']}: site-packages {row['site_packages_mib']} MiB = torch's build {row['torch_build_mib']} "
              f"MiB + the rest {row['rest_mib']} MiB (the core package's own {row['core_mib']} MiB); "
              f"beyond the core, MiB: {extras}")
    if args.write:
        created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"created": created, "host": f"{platform.system()} {platform.machine()}", "venvs": rows}
        RESULTS.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
