"""The Benchmarks page (docs/hooks/benchmarks.py) prints only figures of benchmarks/results/*.json, each
where it belongs, with the date and machine of the file it comes from."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FILES = sorted((REPO / "benchmarks" / "results").glob("*.json"))
# A figure: a number standing alone (not part of a name such as resnet18, x86/onnx-int8, a date or a time).
FIGURE = re.compile(r"(?<![\w.:/-])-?\d+(?:\.\d+)?(?![\w.:/-])")
SCALES = (1, 100, 1 / 2**20)  # as printed: the value, a percentage, bytes in MiB


def hook():
    spec = importlib.util.spec_from_file_location("docs_hook_benchmarks", REPO / "docs" / "hooks" / "benchmarks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def numbers(doc) -> list[float]:
    """Every number a result file holds, at any depth."""
    if isinstance(doc, dict):
        return [n for v in doc.values() for n in numbers(v)]
    if isinstance(doc, list):
        return [n for v in doc for n in numbers(v)]
    return [float(doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


def printed_forms(doc) -> set[str]:
    """Each number of the file as the page could print it (0 to 4 decimals, scaled as SCALES)."""
    return {f"{n * scale:.{digits}f}" for n in numbers(doc) for scale in SCALES for digits in range(5)}


def scope_of(line: str, model: dict | None, doc):
    """What a line's figures must come from: a table row's own candidate (the eager row: the model's own
    figures), any other line the whole file."""
    if model is None or not line.startswith("| ") or line.startswith("| candidate"):
        return doc
    name = line.strip("|").split(" | ")[0].strip().strip("` *")
    if name == "eager" and "eager" not in model["rows"]:
        return {k: v for k, v in model.items() if not isinstance(v, (dict, list))}
    return model["rows"][name]


def foreign_figures(text: str, doc) -> list[str]:
    """The figures of ``text`` that are not numbers of ``doc`` (a table row's: of its own candidate)."""
    found, model, whole = [], None, printed_forms(doc)
    for line in text.splitlines():
        heading = re.match(r"### (\S+) \(", line)
        if heading:
            model = doc["models"][heading[1]]
        scope = scope_of(line, model, doc)
        forms = whole if scope is doc else printed_forms(scope)
        found += [token for token in FIGURE.findall(line) if token not in forms]
    return found


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_benchmarks_page_prints_only_figures_of_its_file(path: Path) -> None:
    doc = json.loads(path.read_text())
    section = "\n".join(hook().render_file(path))
    assert not foreign_figures(section, doc), f"{path.name}: figures not in the file: {foreign_figures(section, doc)}"
    assert doc["created"][:10] in section


def test_benchmarks_page_foreign_figures_finds_a_figure_not_in_the_file() -> None:
    path = REPO / "benchmarks" / "results" / "latest.json"
    section = "\n".join(hook().render_file(path))
    tampered = section + "\n| `host/onnx-fp32` | fp32 | 123.457 |"
    assert foreign_figures(tampered, json.loads(path.read_text())) == ["123.457"]


def cells(section: str) -> dict[str, list[str]]:
    """Table rows by their first cell (the candidate, backticks and the fastest mark removed)."""
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first, *rest = [c.strip() for c in line.strip("|").split(" | ")]
            rows[first.strip("` *").removesuffix("` *").strip("`")] = rest
    return rows


def test_benchmarks_page_puts_each_candidates_figures_in_its_row() -> None:
    path = REPO / "benchmarks" / "results" / "latest.json"
    doc = json.loads(path.read_text())
    section = "\n".join(hook().render_file(path))
    for model, m in doc["models"].items():
        model_part = section.split(f"### {model} ")[1].split("### ")[0]
        rows = cells(model_part)
        assert set(rows) == set(m["rows"]), model
        for name, r in m["rows"].items():
            prec, p50, vs_eager, _, _, _, _, sqnr, _ = rows[name]
            s = r["speedup_vs_eager"]
            assert (prec, p50, sqnr) == (r["precision"], f"{r['p50_ms']:.3f}",
                                         "-" if r.get("sqnr_db") is None else f"{r['sqnr_db']:.1f}"), name
            assert vs_eager.lstrip("≈") == f"{s['value']:.2f} [{s['low']:.2f}, {s['high']:.2f}]", name


def test_benchmarks_page_names_the_machine_each_file_was_measured_on() -> None:
    module = hook()
    for path in FILES:
        doc = json.loads(path.read_text())
        cpu = (doc.get("machine") or {}).get("cpu") or doc.get("host")
        model = cpu.get("model") if isinstance(cpu, dict) else cpu
        measured = next(line for line in module.render_file(path) if line.startswith("Measured "))
        assert (model or "does not") in measured, path.name
