"""benchmarks/install_sizes.py: a venv's files split into torch's build, the core and each extra; and
docs/install.md quotes the figures of benchmarks/results/install_sizes.json."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from install_sizes import RESULTS, measure  # noqa: E402

MIB = 1 << 20


def dist(site: Path, name: str, mib: int, requires: list[str] = (), extras: list[str] = ()) -> None:
    """A fake installed distribution: ``mib`` MiB in one file its RECORD lists."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (site / name).mkdir()
    (site / name / "data.bin").write_bytes(b"\0" * (mib * MIB))
    lines = [f"Name: {name}", "Version: 1.0", *(f"Provides-Extra: {e}" for e in extras),
             *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")
    (info / "RECORD").write_text(f"{name}/data.bin,,{mib * MIB}\n{info.name}/METADATA,,\n")


def test_install_sizes_splits_torch_the_core_and_each_installed_extra(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    dist(site, "torch", 5, ["nvidia-x", "numpy"])
    dist(site, "nvidia-x", 3)
    dist(site, "numpy", 1)
    dist(site, "torchvision", 1, ["torch"])
    dist(site, "scipy", 2, ["numpy"])
    dist(site, "onnx", 4)
    dist(site, "edgeship", 1, ["torch", "scipy", 'onnx; extra == "onnx"', 'openvino; extra == "openvino"',
                               'edgeship[onnx]; extra == "all"'], extras=["onnx", "openvino", "all"])
    sizes = measure(tmp_path / "venv")
    assert (sizes["site_packages_mib"], sizes["torch_build_mib"], sizes["rest_mib"]) == (17, 10, 7)
    assert sizes["core_mib"] == 3 and sizes["extras_mib"] == {"onnx": 4, "all": 4}  # openvino: not installed


def test_install_page_quotes_the_measured_sizes() -> None:
    doc = json.loads(RESULTS.read_text())
    venvs = {v["venv"]: v for v in doc["venvs"]}
    full, onnx = venvs["all"], venvs["onnx-only"]
    page = (REPO / "docs" / "install.md").read_text()
    table = {row.split(" | ")[0].strip("| `"): int(row.rsplit(" | ", 1)[1].strip(" |").replace(",", ""))
             for row in page.splitlines() if re.match(r"\| (`\[|core|torch)", row)}
    assert table == {"torch's build": full["torch_build_mib"], "core (`pip install edgeship`)": full["core_mib"],
                     **{f"[{k}]": v for k, v in full["extras_mib"].items()}}
    smaller = full["rest_mib"] - onnx["rest_mib"]
    assert (f"holds {onnx['rest_mib']} MiB beside torch's build, one with `edgeship[all]` {full['rest_mib']} MiB, so "
            f"the ONNX-only install is {smaller} MiB ({round(100 * smaller / full['rest_mib'])}%) smaller"
            ) in " ".join(page.split())
