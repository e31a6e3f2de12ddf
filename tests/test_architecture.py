"""The import directions of docs/ARCHITECTURE.md: layers import downwards only, no import cycles
(function-level imports included), and the files shipped to devices import nothing of edgeship."""
from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests import system

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "edgeship"
CYCLES_TOOL = REPO.parent / "shared" / "tools" / "import_cycles.py"
DEVICE_FILES = ("devices.runner", "devices.hashing", "devices.probe", "devices.tensorrt_engine", "devices.postprocess",
                "devices.cpu", "devices.aoti_build")

# Lowest first. A module belongs to the layer of its longest listed prefix and may import its own
# layer and those below it, never above. The picture in docs/ARCHITECTURE.md is this list.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("errors", "fsutil", "metrics", "progress", "cache", "results", "config", "entry", "spec", "outputs",
                    "shapes", "store", "store_migrations", "calibration.dataset", "quantize.settings",
                    "bundle.platforms", "demo", "tasks", "webfiles", "locks", "stopping",
                    *DEVICE_FILES)),
    ("declarations", ("lowering.registry", "profile")),
    ("inputs", ("model", "calibration", "devices")),
    ("lowering", ("lowering", "quantize")),
    ("orchestration", ("pipeline", "reports", "bundle")),
    ("interface", ("api", "cli", "__main__", "matrix")),
]


def imports_of(path: Path, module: str, is_package: bool) -> set[str]:
    """Every edgeship module ``path`` imports, at any depth of the file (relative to the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([base] if base else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m.removeprefix("edgeship.") for m in found if m.startswith("edgeship.")}


def module_graph() -> dict[str, set[str]]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        files[name] = (path, is_package)
    modules = {n.removeprefix("edgeship.") for n in files if n != "edgeship"}
    return {n.removeprefix("edgeship."): imports_of(p, n, pkg) & modules - {n.removeprefix("edgeship.")}
            for n, (p, pkg) in files.items() if n != "edgeship"}


def layer_of(module: str) -> int:
    best, layer = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), index
    assert layer is not None, f"edgeship.{module} belongs to no layer: add it to LAYERS and docs/ARCHITECTURE.md"
    return layer


def test_architecture_layers_import_only_downwards() -> None:
    upward = [f"edgeship.{m} ({LAYERS[layer_of(m)][0]}) imports edgeship.{d} ({LAYERS[layer_of(d)][0]})"
              for m, deps in sorted(module_graph().items()) for d in sorted(deps) if layer_of(d) > layer_of(m)]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_architecture_device_files_import_nothing_of_edgeship() -> None:
    graph = module_graph()
    leaks = {m: sorted(graph[m]) for m in DEVICE_FILES if graph[m]}
    assert not leaks, f"device-side files import the package: {leaks}"


def test_architecture_graph_is_the_real_one() -> None:
    """The checks above pass vacuously on an empty graph: make sure module names and edges are found."""
    graph = module_graph()
    assert len(graph) > 80 and sum(map(len, graph.values())) > 200
    assert {"api", "errors"} <= graph["cli"] and "lowering.registry" in graph["profile.models"]


def test_architecture_layer_check_catches_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: an import from a lower layer into a higher one is found."""
    fake = tmp_path / "edgeship" / "errors.py"
    fake.parent.mkdir()
    fake.write_text("def f():\n    from edgeship.pipeline.run import build\n")
    deps = imports_of(fake, "edgeship.errors", False)
    assert "pipeline.run" in deps and layer_of("pipeline.run") > layer_of("errors")


def test_architecture_has_no_import_cycles() -> None:
    try:
        graphlib.TopologicalSorter(module_graph()).prepare()
    except graphlib.CycleError as e:
        pytest.fail("import cycle: " + " -> ".join(f"edgeship.{m}" for m in e.args[1]))


@pytest.mark.skipif(not CYCLES_TOOL.is_file(),
                    reason=system.reason("checkout", f"{CYCLES_TOOL} is not beside this checkout"))
def test_architecture_shared_cycle_tool_passes() -> None:
    standalone = [f"edgeship.{m}" for m in DEVICE_FILES]
    proc = subprocess.run([sys.executable, str(CYCLES_TOOL), "edgeship", "--standalone", *standalone],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
