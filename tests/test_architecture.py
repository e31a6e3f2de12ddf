"""The import directions of docs/ARCHITECTURE.md: layers import downwards only, no import cycles
(function-level imports included), and the files shipped to devices import nothing of edgeship."""
from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

from edgeship.backends.registry import device_modules
from tests import system

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "edgeship"
CYCLES_TOOL = REPO.parent / "shared" / "tools" / "import_cycles.py"
# What runs on devices, importing nothing of edgeship: the runner, its companions and every
# backend's device-side modules (the registry lists them).
DEVICE_FILES = ("devices.runner", "devices.protocol", "devices.hashing", "devices.probe", "devices.postprocess",
                "devices.cpu", *sorted(m.removeprefix("edgeship.") for m in device_modules().values()))

# Lowest first. A module belongs to the layer of its longest listed prefix and may import its own
# layer and those below it, never above. The picture in docs/ARCHITECTURE.md is this list.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("errors", "fsutil", "metrics", "progress", "cache", "results", "config", "entry", "spec", "outputs",
                    "shapes", "store", "store_migrations", "calibration.dataset", "quantize.settings", "demo", "tasks",
                    "webfiles", "locks", "stopping", "machinekey",
                    *DEVICE_FILES)),
    ("declarations", ("backends", "profile", "quantize.cpu_choice", "bundle.platforms")),
    ("inputs", ("model", "calibration", "devices", "objects")),
    ("lowering", ("lowering", "quantize", "backends.base")),
    ("orchestration", ("pipeline", "reports", "bundle")),
    ("interface", ("api", "cli", "__main__", "matrix")),
]


def imports_of(path: Path, module: str, is_package: bool) -> set[str]:
    """Every edgeship module ``path`` imports, at any depth of the file (relative to the package)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            node.body = []  # imports for annotations only: no dependency when the code runs
    for node in ast.walk(tree):
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


# A backend package's declaration modules (what the registry and the stage cache read): the rest of
# the package (lower, quantize, ...) is the lowering layer.
BACKEND_DECLARATIONS = ("spec", "cpu")


def layer_of(module: str) -> int:
    parts = module.split(".")
    if parts[0] == "backends" and len(parts) == 3 and parts[2] not in BACKEND_DECLARATIONS:
        return [name for name, _ in LAYERS].index("lowering")
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
    assert {"api", "errors"} <= graph["cli"] and "backends.registry" in graph["profile.models"]


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


# Files outside edgeship/backends/ that name a backend, each for a reason docs/ARCHITECTURE.md gives:
# the x86 app's templates (both x86 backends' programs in shared sentences), the linux bundle's one
# LibTorch program for two backends, the web bundle's loader (the .onnx files it loads) and the
# emulated aarch64 board's pinned wheels. The list may only shrink: a file not on it that names a
# backend fails, and so does a file on it that no longer does (take it off).
NAMING_A_BACKEND = {
    "bundle/cpp/CMakeLists.txt",
    "bundle/cpp/README.md.j2",
    "bundle/cpp/main.cpp",
    "bundle/web/edgeship-model.js",
    "bundle/x86_app/README-using.md.j2",
    "bundle/x86_app/README.md.j2",
    "devices/armroot.py",
}


def backend_names_in(text: str) -> set[str]:
    """The backend ids and package names (``pytorch-mobile`` or ``pytorch_mobile``) ``text`` names."""
    import re

    from edgeship.backends.registry import PACKAGES, SPECS

    names = set(SPECS) | {package.rsplit(".", 1)[1] for package in PACKAGES.values()}
    pattern = "|".join(re.escape(n.replace("_", "-")).replace("\\-", "[-_]") for n in sorted(names))
    return {m.lower() for m in re.findall(rf"(?<![A-Za-z0-9])({pattern})(?![A-Za-z0-9])", text, re.I)}


def test_architecture_only_a_backend_package_names_a_backend() -> None:
    naming = set()
    for path in PACKAGE.rglob("*"):
        relative = path.relative_to(PACKAGE)
        if path.is_file() and relative.parts[0] != "backends" and "__pycache__" not in relative.parts:
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # weights, images
            if backend_names_in(text):
                naming.add(str(relative))
    assert not naming - NAMING_A_BACKEND, f"shared files naming a backend: {sorted(naming - NAMING_A_BACKEND)}"
    gone = sorted(NAMING_A_BACKEND - naming)
    assert not gone, f"no longer name a backend, take them off the list: {gone}"


def test_architecture_backend_name_check_finds_both_spellings() -> None:
    assert backend_names_in("lowered by backends/pytorch_mobile, see OpenVINO") == {"pytorch_mobile", "openvino"}
    assert backend_names_in("aotinductor, onnxruntime, coremltools") == set()


# The runtimes a backend's extra installs (and the SDKs of optional parts): imported inside the functions that
# use them, never when a module is imported, so a build imports only its own backends' runtimes and a venv
# with one extra (pip install "edgeship[onnx]") imports edgeship whole.
RUNTIME_PACKAGES = ("executorch", "openvino", "nncf", "coremltools", "torchao", "onnx", "onnxruntime", "onnxscript",
                    "onnxslim", "tensorrt", "polygraphy", "scipy", "sklearn", "playwright", "ray")


def module_level_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports when it is imported (not inside a function or class, nor
    under ``if TYPE_CHECKING``)."""
    found: set[str] = set()
    pending = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending += node.orelse
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            pending += [n for field in ("body", "orelse", "finalbody", "handlers") for n in getattr(node, field, [])]
        elif isinstance(node, ast.ExceptHandler):
            pending += node.body
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_architecture_runtimes_are_imported_only_where_used() -> None:
    eager = {str(p.relative_to(PACKAGE)): sorted(found) for p in PACKAGE.rglob("*.py")
             if (found := module_level_imports(p) & set(RUNTIME_PACKAGES))}
    assert not eager, f"runtimes imported when the module is imported: {eager}"


def test_architecture_runtime_import_check_catches_a_module_level_import(tmp_path: Path) -> None:
    fake = tmp_path / "lower.py"
    fake.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import nncf\n"
                    "try:\n    import openvino.runtime as ov\nexcept ImportError:\n    ov = None\n"
                    "def f():\n    import onnx\n")
    assert module_level_imports(fake) == {"typing", "openvino"}
