"""The build, stage by stage, as the data-flow picture in docs/ARCHITECTURE.md draws it:

    plan -> load model -> evaluation data + float reference -> capture + lower (per variant)
         -> validate (per variant and device) -> reports, bundles, results.json (staged)
         -> publish into the build folder -> results store -> table

Nothing of a build enters its folder before it is all written (``pipeline/output.py``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgeship.backends.registry import SPECS, depends_on_cpu, toolchain
from edgeship.cache import Cache, default_cache
from edgeship.calibration import Dataset
from edgeship.calibration.datasets import evaluation_samples
from edgeship.calibration.provider import calibration_data, calibration_variants
from edgeship.devices import Job
from edgeship.devices.cpu import cpu_facts
from edgeship.devices.hashing import sha256_path
from edgeship.devices.targets import target_cpus
from edgeship.errors import CaptureError, StageTimeout
from edgeship.fsutil import full_disk_is_write_failure, tree_size
from edgeship.lowering.capture import Capturer
from edgeship.model import LazyModel
from edgeship.pipeline.budget import CalibrationBudget
from edgeship.pipeline.finish import Unchanged, publish_build, record_build, record_pending, reuse_output
from edgeship.pipeline.gates import judge_row, results_or_gate_failure
from edgeship.pipeline.lower import Lowered, lower_variant, restored
from edgeship.pipeline.output import RESULTS, STAGED, WORK, BuildFolder, report_names
from edgeship.pipeline.partial import EarlierBuild, earlier_build
from edgeship.pipeline.plan import BuildRequest, Plan, make_plan
from edgeship.pipeline.schedule import (
    ReuseKey,
    measure_all,
    plan_tasks,
    previous_results,
    record_measurements,
    reuse_line,
    unmeasured_devices,
)
from edgeship.pipeline.stagecache import (
    Measurements,
    StageKeys,
    read_results,
    restore_artifact,
    store_artifact,
    vouched_previous,
)
from edgeship.pipeline.validate import Reference, inputs_fingerprint, reference_fingerprint, reference_stage
from edgeship.pipeline.watchdog import Stalled, Watchdog, for_plan
from edgeship.profile.models import Variant
from edgeship.progress import Progress
from edgeship.quantize.selection import select_variant
from edgeship.quantize.settings import scheme_of
from edgeship.results import REFERENCE, ModelInfo, Results, VariantResult, now_utc
from edgeship.tasks.evaluate import TaskJudge

REFERENCE_STEP = "evaluation data + float reference"


def build(request: BuildRequest) -> Results:
    """Run a whole build; raises GateFailure (exit 3) after writing everything when a gate fails."""
    progress = Progress(request.quiet)
    with progress.step("plan") as status:
        plan = make_plan(request)
        status["result"] = (f"{plan.profile.name}: {_variants_text(plan)} of {plan.spec.name}, devices "
                            f"{', '.join(d.name for d in plan.devices)}")
    folder = BuildFolder(plan.out_dir)
    before = folder.manifest() is not None or (plan.out_dir / RESULTS).exists()

    def outcome() -> str:
        return (f"this build was published into {plan.out_dir} before it stopped" if folder.published else
                f"the previous build in {plan.out_dir} is untouched" if before else
                f"nothing was written into {plan.out_dir}")

    def abandon() -> str:  # a watchdog's last resort: the process ends without unwinding this block
        folder.abandon(plan.made)
        return outcome()

    watchdog = for_plan(plan, lambda line: progress.info(line), abandon)
    try:
        with folder.held(not request.no_wait, progress.info, plan.made), \
                full_disk_is_write_failure(plan.out_dir, own_name=True):  # a full disk anywhere (numpy, shutil, ...)
            return _build(plan, folder, progress, watchdog)
    except Stalled as e:  # a stage ran past its [limits] limit: exit 2 (user code) or 3, naming it
        raise (e.stall.error(outcome()) if e.stall else StageTimeout(f"{e}; {outcome()}")) from None
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: say what the folder holds now
        e.outcome = outcome()
        raise


def _build(plan: Plan, folder: BuildFolder, progress: Progress, watchdog: Watchdog) -> Results:
    record_pending(plan, folder, progress)
    keys = StageKeys(plan, target_cpu_stage(plan, progress))
    build_key = keys.build()
    unchanged = None if plan.request.remeasure else unchanged_build(plan, folder, build_key)
    if unchanged is not None:
        reuse_output(plan, folder, unchanged, progress)
        progress.info(f"unchanged since {unchanged.results.created}: reusing {plan.out_dir} (every input, setting "
                      "and artifact is the same; --remeasure measures again)")
        return _verdict(plan, unchanged.results)
    folder.refuse_conflicts(expected_files(plan))
    cache = stage_cache(progress)
    calibration = calibration_stage(plan, progress, watchdog)
    model = LazyModel(plan.spec, plan.request.trust_weights)
    watchdog.params = lambda: model.counts.get("params")  # known once loaded (or from the stage cache)
    with progress.step(REFERENCE_STEP) as status, watchdog.bounded(REFERENCE_STEP, "reference_s", progress=True):
        ref = reference_stage(model, evaluation_data, plan, keys.reference(), cache, plan.out_dir / WORK)
        status["result"] = ref.data.source
    _notices(cache, progress)
    staged = folder.stage()
    earlier = earlier_build(plan, progress.info)
    lowered = lower_all(plan, model, progress, calibration, keys, cache, staged, ref.judge, watchdog, earlier)
    rows = [eager_row(plan, model, ref)] + [variant_row(staged, item) for item in lowered]
    validate_all(plan, model, ref, lowered, rows, progress,
                 None if plan.request.remeasure else Measurements(cache, keys, plan.profile.latency), earlier)
    selection = select_variant(plan.profile.selection, rows, plan.devices[0].name) if plan.profile.selection else None
    results = Results(target=plan.profile.name, created=now_utc(), model=model_info(model, ref),
                      toolchain=toolchain(), variants=rows, selection=selection,
                      build_key=build_key, requested_variants=plan.requested,
                      notes=unmeasured_devices(rows, [d.name for d in plan.devices])
                      + (earlier.left_out(plan, rows) if earlier is not None else []))
    record_build(plan, folder, publish_build(plan, folder, results, progress), progress)
    return _verdict(plan, results)


def _verdict(plan: Plan, results: Results) -> Results:
    """The build's results, or GateFailure (exit 3): ``gates.results_or_gate_failure``."""
    names = [d.name for d in plan.devices]
    return results_or_gate_failure(results, unmeasured_devices(results.variants, names), plan.out_dir / RESULTS)


def unchanged_build(plan: Plan, folder: BuildFolder, key: str) -> Unchanged | None:
    """The previous build when its key is this build's and every file of it is intact: its results.json
    is one this machine's edgeship wrote (read once: the bytes checked are the bytes parsed), each
    artifact has the sha256 its row there holds (the manifest is not signed: whoever writes the folder
    can edit it), and the folder's manifest (or incomplete marker) is this build's and lists results.json,
    every artifact and every other variant file with the sha256 they have. Reports and bundles whose
    sha256 is not the manifest's are listed in ``stale``: written again from results.json, nothing
    lowered or measured."""
    written = read_results(default_cache(), plan.out_dir / RESULTS)
    if written is None or not written.vouched or written.results.build_key != key:
        return None
    previous = written.results
    doc = next((d for d in (folder.incomplete(), folder.manifest())
                if d is not None and d.build_key == key and d.files.get(RESULTS) == written.sha256), None)
    if doc is None:
        return None
    listed = [name for name in doc.files if "/" in name]
    for row in (r for r in previous.variants if r.file):
        if not any(n == row.file or n.startswith(f"{row.file}/") for n in listed):
            return None
        artifact = plan.out_dir / row.file
        if not artifact.exists() or sha256_path(artifact) != row.sha256:   # the signed sha256, not the manifest's
            return None
    if any(folder.sha(name) != doc.files[name] for name in listed):
        return None
    expected = set(report_names()) | {name for name in doc.files if "/" not in name and name != RESULTS}
    return Unchanged(previous, doc, sorted(n for n in expected if folder.sha(n) != doc.files.get(n)))


def expected_files(plan: Plan) -> list[str]:
    """What this build will write, as far as it is known before lowering (checked for conflicts first)."""
    names = [RESULTS, *report_names()]
    if plan.profile.bundle is not None:
        names += [f"{plan.spec.name}-{p}.zip" for p in plan.profile.bundle.platforms]
    return names + [f"{v.name}/model{SPECS[v.backend].suffix}" for v in plan.profile.variants]


def _variants_text(plan: Plan) -> str:
    """``5 variants``, or for a build --variant ``1 of 5 variants (name)``."""
    total = f"{len(plan.profile.variants)} variants"
    return total if plan.requested is None else f"{len(plan.requested)} of {total} ({', '.join(plan.requested)})"


def target_cpu_stage(plan: Plan, progress: Progress) -> list[tuple[str, dict[str, object]]] | None:
    """The CPUs the artifacts whose lowering depends on the CPU will run on (this machine's; each
    remote device's probe, cached per device) of the variants whose backend ``reads_cpus`` (an
    int8 setting chosen by CPU, native code compiled for it, a precision the CPU must support); None
    when no variant depends on it, or when no device runs those runtimes (lowering then takes this
    machine's)."""
    if not any(depends_on_cpu(v) for v in plan.profile.variants):
        return None
    with progress.step("target CPUs") as status:
        runtimes = dict.fromkeys(SPECS[v.backend].runtime for v in plan.profile.variants if depends_on_cpu(v))
        found = dict(pair for runtime in runtimes for pair in target_cpus(plan.devices, runtime, default_cache()))
        cpus = list(found.items()) or None
        status["result"] = "; ".join(f"{name}: {facts.get('model') or facts.get('error') or 'model unknown'}"
                                     for name, facts in cpus or [("this machine", cpu_facts())])
    return cpus


def stage_cache(progress: Progress) -> Cache:
    """The stage cache, checked to be edgeship's; temporary folders of killed builds swept away."""
    cache = default_cache()
    cache.prepare()
    swept = cache.sweep()
    if swept:
        progress.info(f"removed {swept} temporary folder(s) that killed builds left in the stage cache {cache.root}")
    return cache


def _notices(cache: Cache, progress: Progress) -> None:
    """Say what the stage cache discarded (damaged entries) since the last call."""
    for line in cache.notices:
        progress.marked("[yellow]![/yellow]", line)
    cache.notices.clear()


def calibration_stage(plan: Plan, progress: Progress, watchdog: Watchdog) -> Dataset | None:
    """Calibration samples, read and checked before the model loads; None when no variant calibrates."""
    if not any(plan.builds(v.name) for v in calibration_variants(plan.profile)):
        return None  # (a build --variant reads the same samples as a full build: its artifacts are the same)
    bounded = watchdog.bounded("calibration data", "calibration_s", progress=True)  # a batch read is progress
    with progress.step("calibration data") as status, bounded:
        data = calibration_data(plan.profile, plan.spec, plan.calibration_source)
        status["result"] = data.source
    return data


def evaluation_data(plan: Plan) -> Dataset:
    """The evaluation samples: the profile's or spec's data, else seeded random inputs."""
    return evaluation_samples(plan.evaluation_source, plan.spec, plan.profile.evaluation)


def batch_size(model: LazyModel) -> int:
    return int(model.spec.inputs[0].shape[0])


def lower_all(plan: Plan, model: LazyModel, progress: Progress, calibration: Dataset | None,
              keys: StageKeys, cache: Cache, staged: Path, judge: TaskJudge, watchdog: Watchdog,
              earlier: EarlierBuild | None = None) -> list[Lowered]:
    """Lower every variant the build makes into the staging folder, or restore it there from the stage
    cache (checked), and for a build --variant restore the artifacts of the earlier build's variants it
    may keep (``earlier``); CaptureError when no capture method takes the model at all. ``judge`` reads the
    float model's outputs for the accuracy budget some quantizers choose by; each capture method and
    each lowering run under the ``watchdog``'s limits."""
    step = {"label": ""}  # the variant whose step captures (a capture method runs once, for the first that needs it)
    capturer = Capturer(model, bounded=lambda stage: watchdog.bounded(f"{step['label']}: {stage}", "capture_s"))
    out = []
    provide = (lambda: calibration) if calibration is not None else None
    keeping = {v.name for v in earlier.candidates(plan)} if earlier is not None else set()
    for variant in plan.profile.variants:
        if not plan.builds(variant.name):
            item = _keep(variant, earlier, keys, cache, staged, progress) if variant.name in keeping else None
            out += [item] if item is not None else []
            continue
        step["label"] = f"lower {variant.name} ({variant.backend} {variant.precision})"
        with progress.step(step["label"]) as status:
            key = keys.artifact(variant)
            record = restore_artifact(cache, key, staged / variant.name)
            if record is not None:
                item = restored(variant, record, staged / variant.name)
                status["result"] = f"{_size(item.artifact.path)}, from the stage cache"
            else:
                budget = CalibrationBudget.of(judge, plan.profile.gates.merged(variant.gates))
                item = lower_variant(plan.profile, variant, capturer, staged, calibration=provide,
                                     debug=plan.request.debug, cache=cache, cpus=keys.cpus, budget=budget,
                                     watchdog=watchdog)
                if item.error:
                    status.update(warn="1", result=item.error)
                else:
                    store_artifact(cache, key, item.artifact.path.parent, item.cache_record())
                    status["result"] = f"{_size(item.artifact.path)} via {item.capture}"
        _notices(cache, progress)
        out.append(item)
    if all(item.capture is None for item in out if plan.builds(item.variant.name)):
        tried = "; ".join(str(f) for f in capturer.failures())
        raise CaptureError(f"{plan.spec.source or plan.spec.name}: the model could not be captured by "
                           f"any method the profile allows: {tried}")
    return out


def _keep(variant: Variant, earlier: EarlierBuild, keys: StageKeys, cache: Cache, staged: Path,
          progress: Progress) -> Lowered | None:
    """A variant the build --variant did not ask for: its earlier artifact, when it may be kept."""
    with progress.step(f"keep {variant.name} from the earlier build") as status:
        item = earlier.artifact(variant, keys, cache, staged)
        status.update(result=f"{_size(item.artifact.path)}, from the stage cache" if item else "not kept",
                      warn="" if item else "1")
    _notices(cache, progress)
    return item


def eager_row(plan: Plan, model: LazyModel, ref: Reference) -> VariantResult:
    return VariantResult(name=REFERENCE, backend=REFERENCE, precision="fp32",
                         notes=["the float PyTorch model: the reference every variant is compared with",
                                *ref.judge.reading()])


def variant_row(staged: Path, item: Lowered) -> VariantResult:
    """The results row for a lowered variant, before measurement (``file`` relative to the staging
    folder, which is laid out as the build folder will be)."""
    row = VariantResult(name=item.variant.name, backend=item.variant.backend,
                        precision=item.variant.precision, error=item.error,
                        quantization=scheme_of(item.variant.precision, item.variant.quantization))
    row.lowering.seconds = item.seconds
    row.lowering.reused = item.reused
    row.lowering.capture = item.capture
    row.lowering.capture_seconds = item.capture_seconds
    row.lowering.notes = list(item.notes)
    if item.artifact:
        path = item.artifact.path
        row.file = path.relative_to(staged).as_posix()
        row.size_bytes = tree_size(path)
        row.sha256 = item.artifact_sha256()
        row.lowering.notes += item.artifact.notes
        row.lowering.details = item.artifact.details
    else:
        row.gates.passed = False
        row.gates.failures.append(item.error or "no artifact")
    return row


def validate_all(plan: Plan, model: LazyModel, ref: Reference, lowered: list[Lowered],
                 rows: list[VariantResult], progress: Progress, kept: Measurements | None = None,
                 earlier: EarlierBuild | None = None) -> None:
    """Measure the eager model and every artifact on every device (devices concurrently, one job
    at a time on each); fill each row's latency, accuracy and gates. With ``kept`` (the stage
    cache's measurements), a pair another build measured on this machine (the same file, inputs and
    settings) is taken from it, and what is measured here is kept there. For a build --variant, the
    rows of variants not asked for take their measurements from the ``earlier`` build, never measured
    here; a row whose measurements do not all hold is dropped from ``rows`` and ``lowered``."""
    jobs: list[tuple[VariantResult, Job, str | None]] = [(rows[0], eager_job(plan, model, ref), None)]
    for item, row in zip(lowered, rows[1:]):
        if item.artifact is not None:
            jobs.append((row, artifact_job(plan, model, ref, item),
                         item.backend.unavailable_here(item.options, item.variant.precision)))
    others = [j for j in jobs if not plan.builds(j[0].name)]   # a build --variant's rows kept from the earlier one
    jobs = [j for j in jobs if plan.builds(j[0].name)]
    sized = size_jobs(plan, ref, jobs[1:])
    current = ReuseKey((model.spec.entry, model.weights_sha256, model.params), inputs_fingerprint(ref),
                       reference_fingerprint(ref),
                       {size: (inputs_fingerprint(r), reference_fingerprint(r)) for size, r in ref.sizes.items()})
    # Measurements are reused unless --remeasure (quietly when there is nothing to reuse yet).
    results_path = plan.out_dir / "results.json"
    reuse = plan.request.resume or (not plan.request.remeasure and results_path.exists())
    previous = vouched_previous(previous_results(results_path, reuse, progress), results_path,
                                kept.cache if kept is not None else default_cache(), lambda s: progress.info(s))
    tasks, reasons = plan_tasks(jobs + sized, plan.devices, plan.out_dir / WORK, previous, current,
                                kept.get if kept is not None else None)
    if kept is not None:
        _notices(kept.cache, progress)   # measurement entries discarded: measured again
    if previous is not None:
        progress.info(reuse_line(tasks, reasons, plan.out_dir / "results.json"))
    cached = [t.label for t in tasks if t.cached]
    if cached:
        progress.info(f"measured by an earlier build on this machine, reused from the stage cache: "
                             f"{len(cached)} of {len(tasks)} ({', '.join(cached)})")
    if earlier is not None:   # every measurement taken from the earlier build, or the row is dropped
        tasks += earlier.measurements(others + size_jobs(plan, ref, others), plan, current, plan.out_dir / WORK)
        earlier.discard(rows, lowered, plan.out_dir / WORK / STAGED)
        jobs += [j for j in others if any(j[0] is row for row in rows)]
    with progress.step(f"measure on {', '.join(d.name for d in plan.devices)}") as status:
        measure_all(tasks, plan.profile.latency, progress)
        status["result"] = f"{sum(t.reused is None for t in tasks)} measurement(s)"
    for row, _job, _unavailable in jobs:
        record_measurements(row, [t for t in tasks if t.row is row], ref, current)
        if not row.is_reference:
            judge_row(row, plan.profile.gates_for(_variant(plan, row.name)), ref.judge.task, ref.names, model.spec)
    for task in tasks if kept is not None else []:   # measured here, its accuracy filled in: kept for others
        if task.result is not None:
            kept.keep(task.device, task.device.planned(task.job), task.result.latency)


def size_jobs(plan: Plan, ref: Reference, jobs: list[tuple[VariantResult, Job, str | None]]
              ) -> list[tuple[VariantResult, Job, str | None]]:
    """The artifact jobs again at a dynamic model's min and max sizes: outputs only, or timed too
    when the profile's ``latency.sizes`` is "all"."""
    timed = plan.profile.latency.sizes == "all"
    return [(row, replace(job, size=size, inputs=sized.inputs_npz, warmup=job.warmup if timed else 0,
                          iterations=job.iterations if timed else 0), unavailable)
            for size, sized in ref.sizes.items() for row, job, unavailable in jobs]


def _variant(plan: Plan, name: str) -> Variant:
    return next(v for v in plan.profile.variants if v.name == name)


def eager_job(plan: Plan, model: LazyModel, ref: Reference) -> Job:
    """The float model, timed by the same runner in a fresh process (host only)."""
    options = {"spec": model.spec.model_dump(mode="json"), "base_dir": str(model.spec.base_dir),
               "trust_weights": plan.request.trust_weights}
    return _job(plan, model, ref, REFERENCE, None, None, options)


def artifact_job(plan: Plan, model: LazyModel, ref: Reference, item: Lowered) -> Job:
    path = item.artifact.path
    return _job(plan, model, ref, item.backend.runtime, path, item.artifact_sha256(),
                item.backend.job_options(item.options, item.variant.precision, model.spec))


def _job(plan: Plan, model: LazyModel, ref: Reference, runtime: str, artifact: Path | None,
         sha: str | None, options: dict[str, object]) -> Job:
    lat = plan.profile.latency
    return Job(runtime=runtime, artifact=artifact, sha256=sha, inputs=ref.inputs_npz,
               input_names=[i.name for i in model.spec.inputs], batch=batch_size(model),
               warmup=lat.warmup, iterations=lat.iterations, threads=lat.threads,
               timeout_s=lat.timeout_s, options=options)


def model_info(model: LazyModel, ref: Reference) -> ModelInfo:
    spec = model.spec
    return ModelInfo(name=spec.name, entry=spec.entry, weights_sha256=model.weights_sha256,
                     inputs=[i.described() for i in spec.inputs], params=model.params,
                     flops=model.flops, seed=spec.seed, outputs=[s.to_json() for s in ref.signatures],
                     task=spec.task)


def _size(path: Path) -> str:
    n = tree_size(path)
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB"
