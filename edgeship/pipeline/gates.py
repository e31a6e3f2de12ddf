"""Gate judging: a variant's row judged from its figures alone (its accuracy block, its latency rows,
the output names its artifact declares), against the variant's gates and the task's choice of them.

Nothing here measures, loads a model or reads the evaluation data: validation (``validate.py``,
``schedule.py``) fills the row's figures, ``run.py`` calls :func:`judge_row` on each measured row,
and :func:`results_or_gate_failure` turns the judged rows into the build's exit.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeship.errors import GateFailure
from edgeship.outputs import graph_name
from edgeship.profile import Gates
from edgeship.results import Accuracy, GateResult, Latency, Results, VariantResult
from edgeship.tasks.evaluate import GATE_METRICS, SET_GATES, TASK_GATES

if TYPE_CHECKING:
    from edgeship.spec import ModelSpec

NON_FINITE = "outputs contain {n} non-finite values (NaN or inf)"
NOT_INFORMATIVE = "accuracy not informative"


def judge_row(row: VariantResult, gates: Gates, task: str, names: list[str], spec: ModelSpec) -> None:
    """Set a measured variant's ``row.gates`` from its figures: ``gates`` (the profile's merged with
    the variant's) as ``task`` checks them, on every device and size, and the output names its
    artifact declares against ``names`` (the float model's); add notes on gates the task ignores and,
    where it failed, on the other way to deploy a detector (``spec``). A row without any device row
    (every device of the build skipped it by design, each saying why in the notes) is not checked:
    ``gates.checked`` false, never a pass; the build does not fail on it."""
    if row.error is None:
        if not row.latency:
            row.gates.checked = False
            row.notes.append("gates not checked: no device in this build can run the artifact")
        else:
            row.gates = check_device_gates(gates, row.accuracy, row.latency, task)
            row.gates.failures += declared_name_mismatch(row, names)
            row.gates.passed = not row.gates.failures
            row.notes += gate_notes(gates, task)
    if not row.gates.passed:
        row.notes += form_hint(spec)


def results_or_gate_failure(results: Results, unmeasured: list[str], results_path: Path) -> Results:
    """The build's results, or GateFailure (exit 3) when a gate or the selection budget failed, or a
    requested device measured nothing (``unmeasured``: ``schedule.unmeasured_devices``). A build --variant
    is judged by the variants it built: a row it kept from the earlier build does not decide its exit."""
    failed = [r.name for r in results.variants if not r.gates.passed and results.built(r)]
    problems = [f"{len(failed)} variant(s) failed validation: {', '.join(failed)}"] if failed else []
    problems += unmeasured
    if problems:
        raise GateFailure(f"{'; '.join(problems)}; see {results_path}", results)
    selection = results.selection
    if selection is not None and selection.selected is None:
        raise GateFailure(f"selection: no variant is inside the budget ({selection.budget}); "
                          f"see {results_path}", results)
    return results


def form_hint(spec: Any) -> list[str]:
    """For a detector that includes its own post-processing, the other way to deploy it."""
    if spec.task != "detection" or spec.task_settings().postprocess != "model":
        return []
    return ["the model includes its post-processing (NMS: data-dependent shapes, an op many runtimes lack); where "
            "a backend cannot capture or run it, deploy the network up to its raw head outputs and let edgeship "
            "decode them: [detection] postprocess = \"host\" (examples/detection/ssdlite-host.toml)"]


def declared_name_mismatch(row: VariantResult, names: list[str]) -> list[str]:
    """A failure when the artifact declares output names (a converted graph's) other than the float model's."""
    declared = [o.get("name") for o in row.lowering.details.get("outputs", []) if isinstance(o, dict)]
    expected = [graph_name(n) for n in names]
    if not declared or declared == expected:
        return []
    return [f"output names: the artifact declares {', '.join(map(str, declared))}; the float model's outputs are "
            f"{', '.join(expected)}"]


def gate_notes(gates: Gates, task: str) -> list[str]:
    """What the variant's notes say about gates the task does not check, or the lack of any."""
    notes = []
    skipped = inapplicable_gates(gates, task)
    if skipped:
        notes.append(f"gates not checked for task {task}: {', '.join(skipped)} (the task is judged by "
                     f"{', '.join(TASK_GATES[task])})")
    if not has_accuracy_gates(gates, task):
        notes.append(f"no accuracy gate of task {task} is set ({', '.join(TASK_GATES[task])}): accuracy is "
                     "reported, not checked")
    return notes


def check_device_gates(gates: Gates, accuracy: Accuracy | None, latency: list[Latency],
                       task: str = "classification") -> GateResult:
    """check_gates on the variant's accuracy, plus the accuracy gates on every other device that
    returned outputs (a device whose runtime computes differently fails the variant too), and a
    failure for every device (and size) where the artifact did not run or was not measured (a lost or
    busy device: never a pass on missing figures), where its outputs differ from the float model's in
    count, shape or dtype, when no device returned outputs to judge the accuracy gates by, and when no
    real CPU timed it for the latency gate (only emulators, or no device row at all). Gates on the whole
    evaluation set (``SET_GATES``) are not judged on the few seeded samples of the min and max sizes."""
    result = check_gates(gates, accuracy, latency, task)
    first = next((row for row in latency if row.accuracy is accuracy and accuracy is not None), None)
    for row in latency:
        where = row.device + (f" at the {row.size} size" if row.size else "")
        result.failures += [f"output signature on {where}: {m}" for m in row.output_mismatch]
        if row.run_error is not None:  # the artifact itself failed there
            result.failures.append(f"did not run on {where}: {row.run_error}")
        elif row.p50_ms is None and row.mean_ms is None and row.accuracy is None:  # device lost, busy, ...
            why = next((n for n in row.notes if n.startswith("not measured")), "not measured: no result came back")
            result.failures.append(f"{why.replace('not measured', f'not measured on {where}', 1)}")
        if row.accuracy is not None and row.accuracy is not accuracy:
            row_gates = gates.model_copy(update=dict.fromkeys(SET_GATES)) if row.size else gates
            beside = first if first is not None and not row.size and first.device != row.device else None
            result.failures += [f"{f}{_on_first(f, beside)} on {where}"
                                for f in check_gates(row_gates, row.accuracy, [], task).failures
                                if not (f.startswith(NOT_INFORMATIVE) and f in result.failures)]  # said once
    if accuracy is None and has_accuracy_gates(gates, task) and not (latency and all(map(_lost, latency))):
        result.failures.append("accuracy not computed: no device returned outputs to compare with the float "
                               "model's (accuracy gates not checked)")
    if gates.max_p50_ms is not None and not any(map(_timed_here, latency)):  # check_gates judged no row
        why = ("only emulated devices timed it (an emulator's time is not the CPU's)" if latency else
               "no device of the build ran the artifact")
        result.failures.append(f"p50 not measured on any device (gate max {gates.max_p50_ms:g} ms): {why}")
    result.passed = not result.failures
    return result


def _lost(row: Latency) -> bool:
    """A device row that already fails the variant as not run or not measured (no figure at all)."""
    return row.run_error is not None or (row.p50_ms is None and row.mean_ms is None and row.accuracy is None)


def _timed_here(row: Latency) -> bool:
    """A row the latency gate judges: not outputs only (a size other than opt), not an emulator's time."""
    return not ((row.size and row.mean_ms is None) or row.emulated)


def _on_first(failure: str, first: Latency | None) -> str:
    """" (host: 30.2)": the failed figure on the first device, beside a failure on another one (the
    same artifact on other kernels), where the first device measured it."""
    if first is None or first.accuracy is None:
        return ""
    metric = failure.split(" ", 1)[0]
    value = getattr(first.accuracy, metric, None)
    if value is None and first.accuracy.task is not None:
        value = first.accuracy.task.values.get(metric)
    return f" ({first.device}: {value:.4g})" if isinstance(value, int | float) else ""


def has_accuracy_gates(gates: Gates, task: str = "classification") -> bool:
    return any(getattr(gates, name) is not None for name in TASK_GATES[task])


def inapplicable_gates(gates: Gates, task: str) -> list[str]:
    """The accuracy gates the profile sets that the task does not check (e.g. min_sqnr_db for
    detection: element-wise SQNR over detections is not what 'accurate' means there)."""
    accuracy_gates = {name for names in TASK_GATES.values() for name in names}
    return sorted(n for n in accuracy_gates - set(TASK_GATES[task]) if getattr(gates, n) is not None)


def check_gates(gates: Gates, accuracy: Accuracy | None, latency: list[Latency],
                task: str = "classification") -> GateResult:
    """Compare measured values with the gates the task checks (``TASK_GATES``). An accuracy gate
    whose value was not measured fails; the top-1 gate is skipped only where the top-1 classes were
    compared (agreement) but the evaluation data has no labels to score them (the notes say so).
    Outputs with NaN or inf always fail; accuracy that is not informative fails the accuracy gates
    (they would pass without proving anything). Element-wise gates (SQNR, cosine) hold for every
    output of a classification or generic model, not only the first."""
    failures: list[str] = []
    if accuracy is not None and accuracy.non_finite:
        failures.append(NON_FINITE.format(n=accuracy.non_finite))
    elif accuracy is not None and not accuracy.informative and has_accuracy_gates(gates, task):
        failures.append(f"{NOT_INFORMATIVE}: {accuracy.uninformative_reason} (accuracy gates not checked)")
    elif accuracy is not None and task in ("classification", "generic"):
        failures += _element_gates(gates, accuracy, task)
    elif accuracy is not None:
        failures += _task_gates(gates, accuracy, task)
    if gates.max_p50_ms is not None:
        for row in latency:  # like the accuracy gates: unmeasured or non-finite never passes
            if not _timed_here(row):
                continue  # outputs only at this size, or an emulator's time: gated where the CPU was timed
            if row.p50_ms is None:
                failures.append(f"p50 not measured on {row.device} (gate max {gates.max_p50_ms:g} ms)")
            elif not row.p50_ms <= gates.max_p50_ms:
                failures.append(f"p50 {row.p50_ms:.3g} ms on {row.device} > {gates.max_p50_ms:g} ms")
    return GateResult(passed=not failures, failures=failures)


def _low(failures: list[str], field: str, limit: float | None, value: float | None, identical: bool = False) -> None:
    if limit is None:
        return
    if value is None:
        if not (field.startswith("sqnr_db") and identical):
            failures.append(f"{field} not measured (gate min {limit})")
    elif not math.isfinite(value) or value < limit:
        failures.append(f"{field} {value:.4g} < {limit:g}")


def _element_gates(gates: Gates, accuracy: Accuracy, task: str) -> list[str]:
    failures: list[str] = []
    _low(failures, "sqnr_db", gates.min_sqnr_db, accuracy.sqnr_db, accuracy.max_abs_err == 0.0)
    _low(failures, "cosine", gates.min_cosine, accuracy.cosine)
    if task == "classification":
        _low(failures, "agreement", gates.min_agreement, accuracy.agreement)
        drop, limit = accuracy.top1_drop, gates.max_top1_drop
        if limit is not None and drop is None and accuracy.agreement is None:  # no top-1 class compared at all
            failures.append(f"top1_drop not measured (gate max {limit:g})")
        elif limit is not None and drop is not None and not drop <= limit:  # drop None here: no labels
            failures.append(f"top1_drop {drop:.3g} points > {limit:g}")
    for out in accuracy.outputs:
        if out.name == accuracy.output or out.note is not None:
            continue  # the primary output is checked above; others without element-wise figures say why
        _low(failures, f"sqnr_db of output {out.name}", gates.min_sqnr_db, out.sqnr_db, out.max_abs_err == 0.0)
        _low(failures, f"cosine of output {out.name}", gates.min_cosine, out.cosine)
    return failures


def _task_gates(gates: Gates, accuracy: Accuracy, task: str) -> list[str]:
    failures: list[str] = []
    values = accuracy.task.values if accuracy.task is not None else {}
    notes = accuracy.task.notes if accuracy.task is not None else {"error": "no task metrics"}
    for gate in TASK_GATES[task]:
        limit = getattr(gates, gate)
        metric = "cosine_mean" if (gate, task) == ("min_cosine", "embedding") else GATE_METRICS[gate]
        if limit is not None and values.get(metric) is None:
            why = notes.get(metric) or notes.get("error") or "not computed"
            failures.append(f"{metric} not measured (gate min {limit:g}): {why}")
        else:
            _low(failures, metric, limit, values.get(metric))
    return failures
