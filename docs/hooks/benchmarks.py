"""The site's Benchmarks page, written from benchmarks/results/*.json when MkDocs builds the site.

Nobody writes its figures by hand: each table row is one candidate of a result file, each figure is a
value of that file rounded for reading, and each file's section says when and on which machine it was
measured. ``render`` is plain Python (tests/docs/test_benchmarks_page.py checks every figure against the
files); ``on_files`` is the MkDocs hook (mkdocs.yml ``hooks:``) that adds the page as ``benchmarks.md``.
"""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
PAGE = "benchmarks.md"
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")  # what decides int8/bf16
# What made each file (its make target or script) and what it holds; files not named here are listed as found.
MADE_BY = {
    "latest.json": ("make bench", "the demo, resnet18, mobilenet_v3_large and all-MiniLM-L6-v2: every artifact of "
                    "the profiles named below against eager PyTorch and the peers a user would otherwise reach for"),
    "trained.json": ("make bench / make bench-trained", "the two models with trained weights side by side per "
                     "backend and precision: task figures, size, p50"),
    "x86.json": ("make bench", "an earlier run with the x86 (OpenVINO) profile"),
    "linux.json": ("make bench", "an earlier run with the linux (LibTorch) profile"),
    "cold_start.json": ("make bench", "an earlier run, the first with cold start and memory per candidate"),
    "mobilenet_autokeep.json": ("benchmarks/bench.py", "mobilenet_v3_large alone, after a change to keep_float"),
    "ceiling.json": ("make bench-ceiling", "resnet18's convolutions and linear layer as int8 GEMMs at their own "
                     "shapes: the speed-up over eager no int8 variant can pass on that machine"),
    "cpu_kinds.json": ("make bench-cpu-kinds", "every int8 path's SQNR on each x86 CPU kind (native, emulated AVX2, "
                       "dispatch capped)"),
    "profile.json": ("make bench-profile", "where resnet18's int8 time goes, layer by layer"),
    "team.json": ("make bench-team", "Ray's overhead per build task and PostgreSQL rows/s from concurrent writers"),
    "web_settings.json": ("make bench-web-settings", "the web profile's int8 forms and fp16 in Chromium"),
    "web_ceiling.json": ("make bench-web-ceiling", "the same work in onnxruntime-web and native ONNX Runtime"),
    "zoo.json": ("make zoo", "every zoo model built for every target"),
}
BENCH_COLUMNS = {
    "candidate": "an edgeship variant (`profile/variant`) or a peer (`peer: ...`, the way a user would do it "
                 "without edgeship); `*` marks the fastest inside the accuracy budget",
    "prec": "the precision it computes in",
    "p50 ms": "median latency of one inference, timed in interleaved rounds in worker processes",
    "vs eager": "eager PyTorch's time over this candidate's (above 1: faster than eager), with its 95% interval "
                "over the rounds; `≈` marks a tie (the interval holds 1)",
    "vs best peer": "the fastest peer of the same precision's time over this candidate's, with its interval",
    "of peak": "the candidate's operations per second as a share of the machine's measured GEMM peak for its "
               "precision (none measured for bf16)",
    "size vs ORT": "the artifact's size over ONNX Runtime's default export of the same model",
    "top-1 drop": "points of top-1 accuracy lost against the float model, where the evaluation data is labelled",
    "SQNR dB": "signal-to-quantization-noise ratio of the outputs against the float model",
    "budget": "inside the accuracy budget the headlines are judged by",
}
TRAINED_COLUMNS = {
    "size MiB": "the artifact's size",
    "p50 ms": "median latency, timed in the rounds of the file named above",
    "task": "the model's task figures against the float model (top-1 and SQNR for the demo; mean and worst "
            "cosine and recall@1 for the sentence encoder)",
    "kept float": "layers int8 keep_float kept in float",
}


def fig(value, digits: int = 2, pct: bool = False) -> str:
    """A figure of a result file as the page prints it; `-` where the file has none."""
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if pct else f"{value:.{digits}f}"


def ratio(r: dict | None) -> str:
    if not r:
        return "-"
    return f"{'≈' if r.get('verdict') == 'tie' else ''}{r['value']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"


def when(doc: dict) -> str:
    created = doc.get("created") or ""
    return f"{created[:10]} {created[11:16]} UTC" if len(created) >= 16 else "date not recorded"


def machine(doc: dict) -> str:
    """The machine a file was measured on, as far as the file records it."""
    m = doc.get("machine") or {}
    cpu = m.get("cpu") or doc.get("host")
    parts = []
    if isinstance(cpu, dict):
        parts.append(f"{cpu.get('model', 'CPU model not recorded')} ({cpu.get('arch', '?')})")
    elif isinstance(cpu, str):
        parts.append(cpu)
    cores = m.get("cpus") or m.get("cores")
    if cores:
        parts.append(f"{cores} cores")
    flags = (cpu.get("flags") if isinstance(cpu, dict) else None) or m.get("flags")
    if flags:
        parts.append("with " + (", ".join(f for f in FLAGS if f in flags) or "none of " + ", ".join(FLAGS)))
    peak = m.get("peak_used") or (m if "fp32_gflops" in m else None)
    if peak:
        parts.append(f"measured GEMM peak fp32 {fig(peak['fp32_gflops'], 0)} GFLOP/s, "
                     f"int8 {fig(peak['int8_gops'], 0)} GOP/s")
    if not isinstance(cpu, (dict, str)):
        parts.insert(0, "a CPU the file does not name")
    return "; ".join(parts) if m or cpu else "a machine the file does not record"


def table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|",
            *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)]


def bench_rows(m: dict) -> list[list[str]]:
    rows = [["eager", "fp32", fig(m["eager_p50_ms"], 3), "reference", "-",
             fig(m.get("eager_fraction_of_peak"), pct=True), "-", "-", "-", "-"]]
    for name, r in sorted(m["rows"].items(), key=lambda kv: kv[1]["p50_ms"]):
        star = " *" if name == m.get("best_variant") else ""
        rows.append([f"`{name}`{star}", r["precision"], fig(r["p50_ms"], 3), ratio(r.get("speedup_vs_eager")),
                     ratio(r.get("vs_best_peer_of_its_precision")), fig(r.get("fraction_of_peak"), pct=True),
                     fig(r.get("size_vs_ort_default")), fig(r.get("top1_drop")), fig(r.get("sqnr_db"), 1),
                     "yes" if r.get("within_budget") else "no"])
    return rows


def headlines(m: dict) -> list[str]:
    lines = []
    keys = [k for k in m if k == "best_speedup_vs_eager" or (k.startswith("speedup_vs_best_") and k.endswith("_peer"))]
    for key in keys:
        pair = m.get(key.replace("speedup_vs_", "") + "_pair")
        if pair:
            lines.append(f"- `{key}`: {ratio(m[key])} (`{pair[1]}` against `{pair[0]}`)")
    return lines


def bench_section(name: str, doc: dict) -> list[str]:
    settings = doc.get("settings", {})
    lines = [f"Profiles: {', '.join(settings.get('profiles', []))}; {settings.get('rounds', '?')} rounds "
             f"(up to {settings.get('max_rounds', '?')} for a headline pair), {settings.get('processes', '?')} "
             f"worker processes per candidate."]
    if doc.get("command"):
        lines.append(f"Command: `{doc['command']}`.")
    for model, m in doc["models"].items():
        lines += ["", f"### {model} ({name})", "", f"Accuracy budget: {m.get('budget', 'not recorded')}.", ""]
        lines += headlines(m) + [""] + table(["candidate", "prec", "p50 ms", "vs eager", "vs best peer", "of peak",
                                             "size vs ORT", "top-1 drop", "SQNR dB", "budget"], bench_rows(m))
    return lines


def task_text(figures: dict) -> str:
    if "cosine_mean" in figures:
        return (f"cosine mean {fig(figures['cosine_mean'], 4)}, worst {fig(figures.get('cosine_worst'), 4)}; "
                f"recall@1 vs float {fig(figures.get('recall_at_1_vs_float'), 3)}")
    if figures:
        return f"top-1 {fig(figures.get('top1'), pct=True)}, drop {fig(figures.get('top1_drop'))}, " \
               f"SQNR {fig(figures.get('sqnr_db'), 1)} dB"
    return "the float reference"


def trained_section(name: str, doc: dict) -> list[str]:
    lines = []
    for model, m in doc["models"].items():
        rows = [[f"`{row_name}`", fig(r["size_bytes"] / 2**20, 2) if r.get("size_bytes") else "-",
                 fig(r.get("p50_ms"), 3), task_text(r.get("figures") or {}),
                 str(r["kept_float"]) if r.get("kept_float") is not None else "-"]
                for row_name, r in m["rows"].items()]
        lines += ["", f"### {model} ({name})", "", f"Timed in: {m.get('timed_in', 'not recorded')}.", ""]
        lines += table(["candidate", "size MiB", "p50 ms", "task", "kept float"], rows)
    return lines


def is_bench(doc: dict) -> bool:
    models = doc.get("models")
    return isinstance(models, dict) and all(isinstance(m, dict) and "rows" in m and "eager_p50_ms" in m
                                            for m in models.values())


def render_file(path: Path) -> list[str]:
    """One result file's section: when, where, and its tables (bench-shaped and trained files)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    made_by, what = MADE_BY.get(path.name, ("", "a result file"))
    lines = [f"## `{path.name}`", "", f"{what[0].upper()}{what[1:]}" + (f" (`{made_by}`)." if made_by else "."),
             "", f"Measured {when(doc)} on {machine(doc)}.", ""]
    if is_bench(doc):
        lines += bench_section(path.name, doc)
    elif path.name == "trained.json":
        lines += trained_section(path.name, doc)
    return lines + [""]


def legend(title: str, columns: dict[str, str]) -> list[str]:
    return [f"**{title}**", "", *(f"- **{name}**: {meaning}" for name, meaning in columns.items()), ""]


def render(results: Path = RESULTS) -> str:
    """The whole page: the headline file first (latest.json), the trained models, then every other file."""
    order = ["latest.json", "trained.json"]
    files = sorted(results.glob("*.json"), key=lambda p: (order.index(p.name) if p.name in order else 2, p.name))
    lines = ["# Benchmarks", "",
             "This page is generated from `benchmarks/results/*.json` when the site is built "
             "(`docs/hooks/benchmarks.py`); every figure is one of those files', measured on the machine its "
             "section names. Yours will differ: run the make target a section names to measure your machine.", "",
             *legend("The candidate tables' columns", BENCH_COLUMNS),
             *legend("The trained models' columns", TRAINED_COLUMNS)]
    for path in files:
        lines += render_file(path)
    return "\n".join(lines)


def on_files(files, config):
    """MkDocs hook: the page, generated, as docs/benchmarks.md."""
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    if files.get_file_from_path(PAGE) is not None:
        raise PluginError(f"docs/{PAGE} is written by docs/hooks/benchmarks.py from benchmarks/results/*.json: "
                          "remove the file in docs/ and change the hook instead")
    files.append(File.generated(config, PAGE, content=render()))
    return files
