"""The stage cache: each stage's output kept under a hash of exactly what it was made from.

Five levels, all in :mod:`edgeship.cache` (``artifacts/.cache``, entries written atomically):

- **artifact** (per variant): the variant's folder and what lowering learned (``lowered.json``,
  with the artifact's sha256; the entry lists every file's sha256), keyed by the model
  (spec, weights sha256, the entry module's source), the variant's settings, the capture order,
  the calibration data and settings it used, what of the target CPUs the artifact is made from (its
  backend's ``cpu_dependence``: a setting chosen and the reason naming the CPUs, an instruction
  set), the toolchain versions and edgeship's own source (and that of backends kept outside it);
- **reference**: the evaluation inputs, the float model's outputs on them and the model's facts
  (parameters, FLOPs), keyed by the model, the evaluation data and settings;
- **measurement** (per variant and device, this machine only): a clean measurement, keyed by the
  device (name, host, Python, CPU facts), the runtime and the artifact's sha256 (the float model's
  key for the eager row), the runner's options, the evaluation inputs and float outputs, the latency
  settings, the toolchain and edgeship's source (:class:`Measurements`): a build of another profile
  takes the eager row and every byte-identical artifact's row from it, marked as reused, its
  ``measured_at`` the earlier build's;
- **build**: the key of everything a build reads. An unchanged re-build finds its key in the
  previous results.json with every file intact, and reuses the whole output without importing
  torch. Measurements are reused from the previous results.json (same artifact sha256, inputs and
  latency settings), else from the measurement entries, unless ``--remeasure``.
- **results** (this machine only): a signed record of each results.json a build wrote, by its
  sha256. The previous results.json lies in the user's ``--out`` folder, where anyone who can write
  there can edit it: it is reused (an unchanged re-build, its measurements) only while it has such a
  record, i.e. is byte for byte what this machine's edgeship wrote.

Every restore is checked: the entry's files against the sha256 list stored with them, that list
against this machine's signature (:mod:`edgeship.machinekey`: an entry edited and its list recomputed
does not verify), what is read (``lowered.json``, ``latency.json``, the copied variant folder) against
the signed list, and the artifact against ``lowered.json``. A damaged or unsigned entry is discarded
and the stage computed again (a measurement measured again), and the build says so.

What is not hashed: modules the entry module imports from elsewhere (their package versions are,
through the toolchain). Edit one of those and run ``edgeship cache clear`` or ``--remeasure``.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgeship.backends.registry import cpu_dependence, outside_sources, toolchain
from edgeship.cache import Cache, CacheEntry, EntryDamaged, cache_key
from edgeship.config import ENTRY_PATTERN
from edgeship.devices.base import Device, Job
from edgeship.devices.hashing import sha256_file, sha256_path
from edgeship.devices.local import LocalDevice
from edgeship.entry import entry_source
from edgeship.fsutil import atomic_write_text, full_disk_is_write_failure, remove_path
from edgeship.pipeline.plan import Plan
from edgeship.profile.models import LatencySettings, Variant
from edgeship.quantize.settings import needs_calibration
from edgeship.results import REUSED_FROM_CACHE, Latency, Results, now_utc

if TYPE_CHECKING:
    from edgeship.pipeline.lower import LoweredRecord
    from edgeship.spec import ModelSpec

PACKAGE = Path(__file__).resolve().parent.parent
LOWERED = "lowered.json"
MEASUREMENT, MEASURED = "measurement", "latency.json"   # namespace and file of a kept measurement
WRITTEN = "results"   # namespace of the signed records of the results.json files builds wrote
SOURCE_SUFFIXES = {".py", ".toml", ".j2", ".html", ".kt", ".swift", ".md", ".txt", ".cpp", ".mjs", ".js", ".java"}


@functools.lru_cache(maxsize=1)
def edgeship_source() -> str:
    """sha256 over edgeship's own source files and those of backend packages kept outside it
    (``EDGESHIP_BACKENDS_PATH``): a code change invalidates every stage."""
    h = hashlib.sha256()
    for root in (PACKAGE, *outside_sources()):
        for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts):
            name = path.relative_to(PACKAGE) if root == PACKAGE else path
            h.update(str(name).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def data_fingerprint(source: str | None, base_dir: Path | None) -> str | None:
    """A file's sha256; a folder's (image folder) file names, sizes and times; a callable's module
    source, found from ``base_dir`` (the model spec's folder) as the data loader finds it."""
    if source is None:
        return None
    if re.match(ENTRY_PATTERN, source):
        return f"{source}@{module_fingerprint(source.split(':')[0], base_dir)}"
    path = Path(source)
    if path.is_file():
        return sha256_file(path)
    listing = sorted(f"{p.relative_to(path)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                     for p in path.rglob("*") if p.is_file())
    return hashlib.sha256("\n".join(listing).encode()).hexdigest()


def module_fingerprint(module: str, base_dir: Path | None) -> str:
    """sha256 of a module's source file, found without running it ("unknown" for built-ins)."""
    source = entry_source(module, base_dir)
    return sha256_file(source) if source is not None else "unknown"


def model_key(spec: ModelSpec) -> dict[str, object]:
    """What identifies the float model: its spec, weights, the entry module's source, the seed its
    construction is seeded with (without weights, the seed decides the weights; the reference entry
    records the built state_dict's sha256, which a model loaded later must match) and the labels
    file's content (its class order numbers an image folder's classes: the evaluation labels)."""
    return {"spec": spec.model_dump(mode="json"), "seed": spec.seed,
            "weights": sha256_file(spec.weights) if spec.weights else None,
            "labels": sha256_file(spec.labels) if spec.labels else None,
            "entry_source": module_fingerprint(spec.entry.split(":")[0], spec.base_dir)}


class StageKeys:
    """Every cache key of one build, computed once from the plan (no torch needed). ``cpus``: the
    CPUs the artifacts will run on, when a variant's quantization is chosen by CPU (None: none is, or
    this machine's): an artifact's key holds the setting chosen and why, so one made for a CPU with
    VNNI is not reused for one without."""

    def __init__(self, plan: Plan, cpus: list[tuple[str, dict[str, object]]] | None = None) -> None:
        self.plan = plan
        self.cpus = cpus
        self.common = {"edgeship": edgeship_source(), "toolchain": toolchain()}
        self.model = model_key(plan.spec)
        self.evaluation = data_fingerprint(plan.evaluation_source, plan.spec.base_dir)
        self.calibration = data_fingerprint(plan.calibration_source, plan.spec.base_dir)

    def reference(self) -> dict[str, object]:
        return {**self.common, "model": self.model, "evaluation": self.evaluation,
                "sizes": data_fingerprint(self.plan.sizes_source, self.plan.spec.base_dir),
                "settings": self.plan.profile.evaluation.model_dump(mode="json")}

    def artifact(self, variant: Variant) -> dict[str, object]:
        profile = self.plan.profile
        calibrated = needs_calibration(variant.precision, variant.quantization)
        key: dict[str, object] = {
            **self.common, "model": self.model, "variant": variant.model_dump(mode="json", exclude={"gates"}),
            "capture": profile.capture.model_dump(mode="json"),
            "calibration": {"data": self.calibration,
                            "settings": profile.calibration.model_dump(mode="json")} if calibrated else None}
        cpu = cpu_dependence(variant, self.cpus)
        if cpu is not None:  # what of the target CPUs the backend made the artifact from (its hook)
            key["cpu"] = cpu
        if calibrated and variant.quantization is not None and variant.quantization.keep_float == "auto":
            key["budget"] = profile.gates.merged(variant.gates).model_dump(mode="json")  # what auto keeps for
        return key

    def build(self) -> str:
        """The whole build: everything above plus the profile, devices and request (a build --variant's
        variants as the plan checked them: ``--variant b --variant a`` is ``--variant a --variant b``)."""
        plan = self.plan
        request = {k: str(v) for k, v in vars(plan.request).items()
                   if k not in ("quiet", "debug", "out", "device_wrapper", "matrix", "variants")}
        request["variants"] = str(plan.requested)  # as checked: in the profile's order, each once
        devices = [(d.name, type(d).__name__, getattr(d, "address", None)) for d in plan.devices]
        cpus = {"cpus": self.cpus} if self.cpus is not None else {}
        return cache_key({**self.reference(), "calibration": self.calibration, "devices": devices,
                          "profile": plan.profile.model_dump(mode="json"), "request": request, **cpus})


def restore_artifact(cache: Cache, key: Mapping[str, object], folder: Path) -> LoweredRecord | None:
    """Copy a cached variant folder to ``folder`` (the build's staging folder), checked: None on a
    miss, or when the entry is damaged (then it is discarded, with a line in ``cache.notices``).
    ``Cache.get`` has checked every file of the entry against its signed sha256 list; lowered.json
    as read and the copy are checked against that list (the entry cannot change between the check
    and the copy), the artifact against the sha256 in lowered.json: what a runner loads is what
    lowering wrote on this machine."""
    def read(entry: CacheEntry) -> LoweredRecord:
        record = json.loads(entry.read_bytes(LOWERED))
        remove_path(folder)
        with full_disk_is_write_failure(folder):
            entry.copy_tree("files", folder)
        copy = folder / record["file"]
        if not copy.exists() or sha256_path(copy) != record["sha256"]:
            remove_path(folder)
            raise EntryDamaged(f"files/{record['file']}: sha256 differs from the one in {LOWERED}")
        return record
    return cache.read("artifact", key, read, redo="lowering again")


def store_artifact(cache: Cache, key: Mapping[str, object], folder: Path, record: LoweredRecord) -> None:
    """Keep a freshly lowered variant folder and its lowering record (``file`` relative to the folder);
    the cache lists every file's sha256, checked on each restore."""
    def fill(dest: Path) -> None:
        shutil.copytree(folder, dest / "files", ignore=shutil.ignore_patterns("lowering.log"))
        atomic_write_text(dest / LOWERED, json.dumps(record, indent=1, default=str))
    cache.get_or_compute("artifact", key, fill)


class Measurements:
    """Measurements on this machine kept in the stage cache (``measurement`` entries), so that a
    build of another profile (same model, same stage cache) takes what an earlier one measured of
    the same file instead of timing it again: the float model, which every build measures, and the
    artifacts two profiles share byte for byte (the same variant in a host and an x86 build).

    A measurement is reused only where nothing it depends on has changed: the device (this
    machine: its name, host name, Python and CPU facts), the runtime and the artifact's sha256 (the
    float model's identity for the eager row), the runner's options, the evaluation inputs and the
    float outputs and labels its accuracy is computed against, the latency settings, the toolchain
    and edgeship's own source. Only clean measurements are kept (timed or outputs returned, not
    contended by other work, no runner error); only local devices that are not emulated take part
    (a remote board's identity is its address, not what is on it now). ``--remeasure`` neither
    reads nor writes them. The reused row keeps its ``measured_at`` and says where it came from."""

    def __init__(self, cache: Cache, keys: StageKeys, latency: LatencySettings) -> None:
        self.cache = cache
        self.keys = keys
        self.latency = latency.model_dump(mode="json")
        self.devices: dict[str, dict | None] = {}   # device name -> its part of the key (read once)

    def device_key(self, device: Device) -> dict | None:
        """What identifies ``device``: this machine as a local, not emulated device runs on it (its name,
        host name, Python, CPU facts); None for any other device (its measurements are not kept)."""
        if device.name not in self.devices:
            local = isinstance(device, LocalDevice) and device.transport == "local" and device.emulation is None
            facts = (device.own_cpu() or {}) if local else {}
            self.devices[device.name] = ({"name": device.name, "host": device.address, "python": device.python,
                                          "cpu": {k: facts.get(k) for k in ("model", "arch", "flags")}}
                                         if local else None)
        return self.devices[device.name]

    def key(self, device: Device, job: Job, inputs_sha256: str, reference_sha256: str | None) -> dict | None:
        """The entry's key, or None where a measurement of ``device`` is not kept."""
        identity = self.device_key(device)
        if identity is None or (not job.is_reference and job.sha256 is None):
            return None
        what = {"model": self.keys.model} if job.is_reference else {"sha256": job.sha256}
        return {**self.keys.common, "device": identity,
                "job": {"runtime": job.runtime, **what, "options": job.options, "input_names": job.input_names,
                        "batch": job.batch, "warmup": job.warmup, "iterations": job.iterations,
                        "threads": job.threads, "size": job.size},
                "inputs": inputs_sha256, "reference": reference_sha256, "latency": self.latency}

    def get(self, device: Device, job: Job, inputs_sha256: str, reference_sha256: str | None) -> Latency | None:
        """The kept measurement of ``job`` on ``device``, marked as reused; None on a miss."""
        def read(entry: CacheEntry) -> Latency:
            try:
                return Latency.model_validate_json(entry.read_bytes(MEASURED))
            except ValueError:
                raise EntryDamaged(f"{MEASURED} cannot be read") from None
        key = self.key(device, job, inputs_sha256, reference_sha256)
        lat = self.cache.read(MEASUREMENT, key, read, redo="measuring again") if key is not None else None
        if lat is None:
            return None
        lat.notes.append(f"{REUSED_FROM_CACHE} at {now_utc()}: measured {lat.measured_at} by an earlier "
                         "build on this machine (same file, inputs, float outputs and latency settings; "
                         "--remeasure measures again)")
        return lat

    def keep(self, device: Device, job: Job, lat: Latency) -> None:
        """Keep a measurement just made (after its accuracy was filled in), when it is clean."""
        key = self.key(device, job, lat.inputs_sha256 or "", lat.reference_sha256)
        clean = (lat.run_error is None and not lat.contended and lat.emulated is None
                 and (lat.p50_ms is not None or lat.accuracy is not None)
                 and not any(n.startswith("not measured") for n in lat.notes))
        if key is None or not clean or lat.inputs_sha256 is None:
            return
        kept = lat.model_copy(deep=True, update={"vs_first_device": None})  # another build's devices: not ours

        def fill(dest: Path) -> None:
            atomic_write_text(dest / MEASURED, kept.model_dump_json(indent=1))
        self.cache.get_or_compute(MEASUREMENT, key, fill)


def vouch_results(cache: Cache, data: bytes) -> None:
    """Keep a signed record that this machine's edgeship wrote a results.json of these bytes (the bytes
    written, never a file read back: it may have changed since)."""
    cache.get_or_compute(WRITTEN, _record_key(data), lambda folder: None)


def vouched_results(cache: Cache, data: bytes) -> bool:
    """Whether ``data`` (the bytes of a results.json, read once: the same bytes are then parsed) is byte
    for byte a results.json this machine's edgeship wrote (its signed record is in the stage cache)."""
    return cache.get(WRITTEN, _record_key(data)) is not None


def _record_key(data: bytes) -> dict[str, str]:
    return {"results.json": hashlib.sha256(data).hexdigest()}


@dataclass(frozen=True)
class WrittenResults:
    """A results.json read once: what its bytes hold, their sha256, and whether this machine's edgeship
    wrote them (``vouched``). Checked and parsed from the same bytes, so a file swapped between the two
    cannot pass the check with one content and be read with another."""

    results: Results
    sha256: str
    vouched: bool


def read_results(cache: Cache, path: Path) -> WrittenResults | None:
    """``path`` read once, parsed and checked (None when it cannot be read or is not a results.json)."""
    try:
        data = path.read_bytes()
        results = Results.model_validate_json(data)
    except (OSError, ValueError):
        return None
    return WrittenResults(results, hashlib.sha256(data).hexdigest(), vouched_results(cache, data))


def vouched_previous(previous: Results | None, path: Path, cache: Cache, say: Callable[[str], None]
                     ) -> Results | None:
    """The previous build's results when ``previous`` (read from ``path``) is to be reused and this
    machine's edgeship wrote ``path`` as it is; else None, and ``say`` tells why its measurements are not
    reused. ``path`` is read once more, and what is returned is parsed from the very bytes whose record
    was found, not ``previous``: the file may have changed since ``previous`` was read."""
    if previous is None:
        return None
    written = read_results(cache, path)
    if written is not None and written.vouched:
        return written.results
    say(f"{path} is not a results.json this machine's edgeship wrote (changed since, written elsewhere, or "
        f"by an edgeship before signed results, or the stage cache {cache.root} was cleared): none of its "
        "measurements is reused; measuring everything")
    return None
