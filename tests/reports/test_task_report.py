"""Reports show the task's metrics (detection, segmentation, embedding) and every output's figures,
from hand-made results: each figure as results.json holds it, each null with the results' reason."""
from __future__ import annotations

import csv
import io
import re

from rich.console import Console

from edgeship.reports import Build, Report
from edgeship.reports.console import results_table
from edgeship.reports.csvfile import COLUMNS, render_csv
from edgeship.reports.markdown import md_text
from edgeship.reports.render import render_html, render_markdown
from edgeship.results import Accuracy, Latency, ModelInfo, OutputAccuracy, Results, TaskAccuracy, VariantResult

RAGGED = "the length varies by sample: no element-wise figures (the task's metrics judge it)"
NO_DETECTIONS = "the float model has no detections: nothing to find, so no recall or mAP"
ONE_CLASS = "the float model's masks hold one class only (0)"
ALL_ZERO = "every reference sample is all zeros (8): cosine is undefined"


def results(task: str, outputs: list[dict], accuracies: dict[str, Accuracy | None], model: str = "m",
            target: str = "t") -> Results:
    """A build of ``task``: one variant per entry of ``accuracies`` (the first is the eager row),
    each timed on ``host`` with that accuracy."""
    variants = []
    for i, (name, acc) in enumerate(accuracies.items()):
        lat = Latency(device="host", runtime="r", warmup=1, iterations=4, p50_ms=1.0 + i, accuracy=acc)
        variants.append(VariantResult(name=name, backend="eager" if i == 0 else "onnx", precision="fp32",
                                      size_bytes=None if i == 0 else 2048, accuracy=acc, latency=[lat]))
    return Results(target=target, created="2026-01-01T00:00:00Z", toolchain={}, variants=variants,
                   model=ModelInfo(name=model, entry="m:build", inputs=[], params=1, task=task, outputs=outputs))


def report_of(*builds: Results) -> Report:
    return Report.of([Build(f"{r.model.name}/{r.target}", r, "results.json") for r in builds])


def row(text: str, first_cell: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {first_cell} |"))


def footnote(text: str, reason: str) -> int:
    """The number the Markdown report gives ``reason`` under Notes (as Markdown writes it)."""
    notes = text.split("## Notes")[1].split("\n## ")[0]
    return next(int(m[1]) for m in re.finditer(r"^(\d+)\. (.*)$", notes, re.M) if m[2] == md_text(reason))


def header(text: str, contains: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith("| variant |") and contains in ln)
    return [c.strip() for c in line.strip("|").split("|")]


def csv_rows(report: Report) -> dict[str, dict[str, str]]:
    return {r["variant"]: r for r in csv.DictReader(io.StringIO(render_csv(report)))}


def console_text(r: Results) -> str:
    console = Console(record=True, width=250, color_system=None)
    console.print(results_table(r))
    return console.export_text()


# Detection: boxes (length varies by sample), scores, labels (integers).

DETECTION_OUTPUTS = [{"name": "boxes", "shape": [None, 4], "dtype": "float32", "ragged": True},
                     {"name": "scores", "shape": [None], "dtype": "float32", "ragged": True},
                     {"name": "labels", "shape": [8, 10], "dtype": "int64", "ragged": False}]


def detection_accuracy(values: dict, notes: dict | None = None, labels_equal: float = 1.0) -> Accuracy:
    outputs = [OutputAccuracy(name="boxes", non_finite=0, note=RAGGED),
               OutputAccuracy(name="scores", non_finite=0, note=RAGGED),
               OutputAccuracy(name="labels", max_abs_err=3.0, equal=labels_equal, non_finite=0,
                              note="integer output: compared element by element (equal)")]
    return Accuracy(samples=8, output="boxes", outputs=outputs, non_finite=0,
                    task=TaskAccuracy(task="detection", values=values, notes=notes or {}))


def detection_build() -> Results:
    exact = {"map50_vs_float": 1.0, "recall_vs_float": 1.0, "precision_vs_float": 1.0, "mean_iou_vs_float": 1.0}
    good = {"map50_vs_float": 0.875, "recall_vs_float": 0.9, "precision_vs_float": 0.95, "mean_iou_vs_float": 0.8125,
            "map50_vs_labels": 0.5, "recall_vs_labels": 0.625, "precision_vs_labels": 0.75, "mean_iou_vs_labels": 0.7}
    empty = {"map50_vs_float": None, "recall_vs_float": None, "precision_vs_float": 0.0, "mean_iou_vs_float": None}
    empty_notes = {"map50_vs_float": NO_DETECTIONS, "recall_vs_float": NO_DETECTIONS,
                   "mean_iou_vs_float": "no detection matched"}
    return results("detection", DETECTION_OUTPUTS, {
        "eager": detection_accuracy(exact), "ort-int8": detection_accuracy(good, labels_equal=0.9875),
        "ort-empty": detection_accuracy(empty, empty_notes)})


def test_detection_variants_table_shows_map_and_recall_instead_of_top1() -> None:
    md = render_markdown(report_of(detection_build()))
    columns = header(md, "mAP@0.5 vs float")
    assert columns[5:7] == ["mAP@0.5 vs float", "recall vs float"] and "top-1" not in columns
    assert columns[7:13] == ["precision vs float", "mean IoU vs float", "mAP@0.5 vs labels", "recall vs labels",
                             "precision vs labels", "mean IoU vs labels"]
    cells = [c.strip() for c in row(md, "ort-int8").strip("|").split("|")]
    assert cells[5:13] == ["87.50%", "90.00%", "95.00%", "81.25%", "50.00%", "62.50%", "75.00%", "70.00%"]
    assert "### Task: detection" in md and "a detection matches when its IoU is the threshold or more" in md


def test_detection_nulls_say_not_measured_with_the_results_reason() -> None:
    md = render_markdown(report_of(detection_build()))
    n = footnote(md, f"detection map50_vs_float is null: {NO_DETECTIONS}")
    assert n == footnote(md, f"detection recall_vs_float is null: {NO_DETECTIONS}") - 1
    cells = [c.strip() for c in row(md, "ort-empty").strip("|").split("|")]
    assert cells[5:9] == [f"not measured [{n}]", f"not measured [{n + 1}]", "0.00%",
                          f"not measured [{footnote(md, 'detection mean_iou_vs_float is null: no detection matched')}]"]
    # the eager row holds no *_vs_labels metrics at all: said so, not left blank
    missing = footnote(md, "this variant's results.json holds no detection map50_vs_labels")
    assert f"not measured [{missing}]" in row(md, "eager")


def test_outputs_table_shows_sqnr_equal_share_and_the_note_of_varying_length_outputs() -> None:
    md = render_markdown(report_of(detection_build()))
    assert header(md, "boxes") == ["variant", "boxes", "scores", "labels"]
    n, k = footnote(md, f"output boxes: {RAGGED}"), footnote(md, f"output scores: {RAGGED}")
    outputs = md.split("## Outputs")[1]
    assert row(outputs, "ort-int8") == f"| ort-int8 | not measured [{n}] | not measured [{k}] | 98.75% equal |"
    assert md_text("boxes float32 [?, 4] (length varies by sample)") in md and md_text("labels int64 [8, 10]") in md
    # the SQNR of the primary output (boxes) cannot be element-wise: the same reason, not a number
    assert row(md, "ort-int8").endswith(f"| not measured [{n}] | pass | not recorded |")


def test_detection_html_shows_the_same_figures_and_reasons() -> None:
    html = render_html(report_of(detection_build()))
    assert "<th>mAP@0.5 vs float</th><th>recall vs float</th>" in html and "<th>top-1</th>" not in html
    assert '<td class="num">87.50%</td><td class="num">90.00%</td>' in html
    assert f'title="detection map50_vs_float is null: {NO_DETECTIONS}"' in html
    assert '<h2 id="outputs">Outputs</h2>' in html and "98.75% equal" in html


def test_detection_csv_has_the_task_metrics_and_empty_cells_for_nulls() -> None:
    rows = csv_rows(report_of(detection_build()))
    assert list(rows["eager"])[:len(COLUMNS)] == COLUMNS
    good, empty = rows["ort-int8"], rows["ort-empty"]
    assert (good["task"], good["accuracy_output"], good["output_mismatch"]) == ("detection", "boxes", "")
    assert [float(good[k]) for k in ("map50_vs_float", "recall_vs_float", "map50_vs_labels")] == [0.875, 0.9, 0.5]
    assert (empty["map50_vs_float"], empty["precision_vs_float"], empty["miou_vs_float"]) == ("", "0.0", "")
    assert f"detection map50_vs_float is null: {NO_DETECTIONS}" in empty["not_measured"]
    assert good["not_measured"] == ""


def test_console_shows_map_instead_of_top1_for_detection() -> None:
    text = console_text(detection_build())
    assert "mAP@0.5 vs float" in text and "top-1" not in text
    assert re.search(r"ort-int8 .* 87\.50% ", text) and re.search(r"ort-empty .* - ", text)


# Segmentation: logits [N, C, H, W] judged as masks.

def segmentation_build() -> Results:
    def acc(values: dict, notes: dict, sqnr: float | None) -> Accuracy:
        return Accuracy(samples=8, output="output", sqnr_db=sqnr, max_abs_err=0.0 if sqnr is None else 0.5,
                        non_finite=0, outputs=[OutputAccuracy(name="output", sqnr_db=sqnr)],
                        task=TaskAccuracy(task="segmentation", values=values, notes=notes))

    unlabelled = {"miou_vs_labels": "every pixel of the labels is ignored",
                  "pixel_accuracy_vs_labels": "every pixel of the labels is ignored"}
    return results("segmentation", [{"name": "output", "shape": [8, 3, 16, 16], "dtype": "float32"}], {
        "eager": acc({"miou_vs_float": 1.0, "pixel_agreement": 1.0}, {}, None),
        "ort-int8": acc({"miou_vs_float": 0.9, "pixel_agreement": 0.984375, "miou_vs_labels": None,
                         "pixel_accuracy_vs_labels": None}, unlabelled, 24.25),
        "ort-flat": acc({"miou_vs_float": 1.0, "pixel_agreement": 1.0}, {"miou_vs_float": ONE_CLASS}, 40.0)})


def test_segmentation_shows_miou_and_pixel_agreement_with_reasons() -> None:
    report = report_of(segmentation_build())
    md = render_markdown(report)
    assert header(md, "mIoU")[5:10] == ["mIoU vs float", "pixel agreement", "mIoU vs labels",
                                        "pixel accuracy vs labels", "SQNR (dB)"]
    n = footnote(md, "segmentation miou_vs_labels is null: every pixel of the labels is ignored")
    assert row(md, "ort-int8").startswith(f"| ort-int8 | onnx | fp32 | none | 2.0 KiB | 90.00% | 98.44% | "
                                          f"not measured [{n}] | not measured [{n + 1}] | 24.2 |")
    # a number the results annotate keeps its note; the one output gets no Outputs table
    assert f"| 100.00% [{footnote(md, f'segmentation miou_vs_float: {ONE_CLASS}')}] |" in row(md, "ort-flat")
    assert row(md, "eager").split("|")[10].strip() == "exact" and "## Outputs" not in md
    rows = csv_rows(report)
    assert (rows["ort-int8"]["miou_vs_float"], rows["ort-int8"]["miou_vs_labels"]) == ("0.9", "")
    assert "segmentation pixel_accuracy_vs_labels is null: every pixel" in rows["ort-int8"]["not_measured"]
    assert rows["ort-flat"]["not_measured"] == ""  # a note on a number is not a reason for an empty cell
    assert "mIoU vs float" in console_text(segmentation_build())


# Embedding: cosine per sample.

def embedding_build() -> Results:
    def acc(values: dict, notes: dict | None = None) -> Accuracy:
        return Accuracy(samples=8, output="output", sqnr_db=31.5, cosine=0.9995, max_abs_err=0.01, non_finite=0,
                        task=TaskAccuracy(task="embedding", values=values, notes=notes or {}))

    return results("embedding", [{"name": "output", "shape": [8, 64], "dtype": "float32"}], {
        "eager": acc({"cosine_mean": 1.0, "cosine_worst": 1.0}),
        "ort-int8": acc({"cosine_mean": 0.99871, "cosine_worst": 0.99012}),
        "ort-zero": acc({"cosine_mean": None, "cosine_worst": None},
                        {"cosine_mean": ALL_ZERO, "cosine_worst": ALL_ZERO})})


def test_embedding_shows_cosine_mean_and_worst() -> None:
    md = render_markdown(report_of(embedding_build()))
    assert header(md, "cosine mean")[5:8] == ["cosine mean", "cosine worst", "SQNR (dB)"]
    assert "| 0.9987 | 0.9901 | 31.5 |" in row(md, "ort-int8")
    n = footnote(md, f"embedding cosine_mean is null: {ALL_ZERO}")
    assert f"| not measured [{n}] | not measured [{n + 1}] | 31.5 |" in row(md, "ort-zero")


def test_embedding_shows_the_set_metrics_where_the_results_hold_them() -> None:
    build = embedding_build()
    for v in build.variants:
        if v.accuracy.task.values.get("cosine_mean") is not None:
            v.accuracy.task.values |= {"recall_at_1_vs_float": 0.975, "spearman_vs_float": 0.99812,
                                       "recall_at_1_vs_labels": 0.9625}
    md = render_markdown(report_of(build))
    assert header(md, "cosine mean")[5:10] == ["cosine mean", "cosine worst", "recall@1 vs float",
                                               "Spearman vs float", "recall@1 vs labels"]
    assert "| 0.9987 | 0.9901 | 97.50% | 0.9981 | 96.25% | 31.5 |" in row(md, "ort-int8")
    text = console_text(build)  # the build's console table: the headline and recall@1 vs float
    assert "cosine mean" in text and "recall@1 vs float" in text and "97.50%" in text
    assert "recall@1 vs float" not in console_text(embedding_build())  # older results: not shown
    text = console_text(embedding_build())
    assert "cosine mean" in text and re.search(r"ort-int8 .* 0\.9987 .* 31\.5 ", text)


def test_task_metrics_that_could_not_be_computed_give_the_error() -> None:
    broken = Accuracy(samples=8, non_finite=0, task=TaskAccuracy(task="embedding", notes={
        "error": "this output's length varies by sample; the task needs one array [N, ...]"}))
    r = results("embedding", [], {"eager": broken, "ort": broken.model_copy()})
    report = report_of(r)
    md = render_markdown(report)
    n = footnote(md, "embedding metrics not computed: this output's length varies by sample; the task needs one "
                     "array [N, ...]")
    assert f"| not measured [{n}] | not measured [{n}] |" in row(md, "ort")
    assert "embedding metrics not computed" in csv_rows(report)["ort"]["not_measured"]


# Classification with two outputs: the Variants table as before, plus every output's SQNR.

def two_output_build() -> Results:
    def acc(top1: float, logits: float | None, aux: float) -> Accuracy:
        return Accuracy(samples=8, top1=top1, top1_drop=0.5 - top1, agreement=1.0, sqnr_db=logits, cosine=0.999,
                        max_abs_err=0.0 if logits is None else 0.1, non_finite=0, output="logits",
                        outputs=[OutputAccuracy(name="logits", sqnr_db=logits, max_abs_err=0.0 if logits is None
                                                else 0.1, non_finite=0),
                                 OutputAccuracy(name="aux", sqnr_db=aux, max_abs_err=0.2, non_finite=0)])

    outputs = [{"name": "logits", "shape": [8, 4], "dtype": "float32"}, {"name": "aux", "shape": [8, 16],
                                                                          "dtype": "float32"}]
    return results("classification", outputs, {"eager": acc(0.5, None, 80.0), "ort-int8": acc(0.375, 27.25, 18.5)})


def test_multi_output_classification_adds_an_outputs_table() -> None:
    md = render_markdown(report_of(two_output_build()))
    assert header(md, "top-1")[5:9] == ["top-1", "top-1 drop (pts)", "SQNR (dB)", "agreement"]
    assert "### Task" not in md and "The top-1, agreement and SQNR are of output logits." in md
    outputs = md.split("## Outputs")[1]
    assert row(outputs, "eager") == "| eager | exact | 80.0 |"
    assert row(outputs, "ort-int8") == "| ort-int8 | 27.2 | 18.5 |"
    assert md_text("logits float32 [8, 4]; aux float32 [8, 16]") in outputs


def test_builds_of_different_tasks_get_one_variants_table_each() -> None:
    builds = [two_output_build(), detection_build(), embedding_build()]
    for r, name in zip(builds, ("cls", "det", "emb")):
        r.model.name = name
    report = report_of(*builds)
    md = render_markdown(report)
    sections = md.split("## Outputs")[0].split("### Task: ")[1:]
    assert [s.split("\n")[0] for s in sections] == ["classification", "detection", "embedding"]
    assert "cls/t · ort-int8" in sections[0] and "ort-empty" not in sections[0] and "det/t · ort-empty" in sections[1]
    assert "top-1" not in sections[1].split("\n\n")[1] and "cosine mean" in sections[2]
    outputs = md.split("## Outputs")[1].split("\n## ")[0]
    assert re.findall(r"^### (.*)$", outputs, re.M) == ["cls (cls/t)", "det (det/t)"]
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    assert {r["task"] for r in rows} == {"classification", "detection", "embedding"}


def test_generic_task_shows_sqnr_and_cosine() -> None:
    acc = Accuracy(samples=8, sqnr_db=35.0, cosine=0.99968, max_abs_err=0.01, non_finite=0)
    r = results("generic", [], {"eager": acc, "ort": acc.model_copy()})
    md = render_markdown(report_of(r))
    assert header(md, "SQNR")[5:8] == ["SQNR (dB)", "cosine", "gates"] and "| 35.0 | 0.9997 |" in row(md, "ort")
    assert re.search(r"ort .* 0\.9997 .* 35\.0 ", console_text(r))


def test_a_device_whose_outputs_differ_from_the_float_model_shows_no_accuracy_of_another_device() -> None:
    r = two_output_build()
    ort = r.variant("ort-int8")
    mismatch = "output aux: shape [8, 15] but the float model's is [8, 16]"
    ort.latency.append(Latency(device="phone", runtime="r", warmup=1, iterations=4, p50_ms=5.0,
                               output_mismatch=[mismatch]))
    ort.gates.passed, ort.gates.failures = False, [f"output signature on phone: {mismatch}"]
    report = report_of(r)
    line = next(ln for ln in report.lines if ln.variant.name == "ort-int8")
    assert line.accuracy("phone") is None and line.accuracy("host") is ort.accuracy
    rows = [x for x in csv.DictReader(io.StringIO(render_csv(report))) if x["variant"] == "ort-int8"]
    phone = next(x for x in rows if x["device"] == "phone")
    assert phone["output_mismatch"] == mismatch and phone["top1"] == "" and phone["sqnr_db"] == ""
    assert phone["not_measured"] == f"outputs on phone differ from the float model's: {mismatch}"
    assert md_text(f"FAIL: output signature on phone: {mismatch}") in render_markdown(report)
