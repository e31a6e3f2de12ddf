"""The Python API: anything the command line does, ``import edgeship`` does too.

Every function raises the error types of :mod:`edgeship.errors`; the command line exits with the
type's ``exit_code``: 2 for bad input (a ``BadInputError``: profile, model spec, weights, data,
devices, output folder), 3 when a validation gate failed (``GateFailure``, whose ``results`` holds the
build's results: everything is written first), 1 for anything else (a bug).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeship.pipeline.plan import BuildRequest
from edgeship.pipeline.run import build as _run_build
from edgeship.results import Results

if TYPE_CHECKING:
    import torch

    from edgeship.bundle import Bundle, BundleCheck, Signed
    from edgeship.cache import CacheSummary
    from edgeship.devices.base import DeviceReport
    from edgeship.devices.config import DeviceSet
    from edgeship.matrix.run import MatrixRun
    from edgeship.profile.listing import TargetEntry
    from edgeship.reports import WrittenReport
    from edgeship.store import Upgrade


def build(target: str, model: str | None = None, *, input_shape: str | None = None,
          out: str | Path | None = None, devices_file: str | Path | None = None,
          devices: list[str] | None = None, trust_weights: bool = False, quiet: bool = False,
          debug: bool = False, resume: bool = False, remeasure: bool = False,
          db: str | None = None, no_wait: bool = False, variants: list[str] | None = None) -> Results:
    """Build every variant of ``target`` for ``model`` (the demo when None), validate, write results.
    ``variants``: only these (and the eager reference), as ``build --variant``.

    Raises a BadInputError subclass (exit 2) for bad input and GateFailure (exit 3, carrying the
    results) when a validation gate fails. Unchanged stages come from the stage cache; measurements
    are reused unless ``remeasure``.

    Args:
        target: a profile: a built-in name (``host``, ``android``, ...: ``targets/NAME.toml``) or a profile file.
        model: a model spec (``model.toml``), or ``module:callable`` with ``input_shape``; None: the demo model.
        input_shape: the input shape of a ``module:callable`` model, e.g. ``"1,3,224,224"``.
        out: the build folder; default ``artifacts/<target>/<model name>``.
        devices_file: a ``devices.toml`` naming where to measure; without it only the built-in devices.
        devices: device names to measure on; default the profile's ``devices``, else ``host``.
        trust_weights: allow checkpoints that need arbitrary unpickling (can run code: files you trust only).
        quiet: no progress lines.
        debug: tracebacks, and stop at the first lowering error.
        resume: reuse the measurements of the folder's results.json and say what is reused (the default
            unless ``remeasure``).
        remeasure: measure every variant again, even when its artifact and settings are unchanged.
        db: the results store's URL; default ``$EDGESHIP_DB``, else ``sqlite:///artifacts/results.db``.
        no_wait: when another build is using ``out``, stop (OutputError) instead of waiting for it.

    Returns:
        The build's :class:`~edgeship.results.Results`, as written to ``out``'s results.json.

    Raises:
        BadInputError: (exit 2) its subclasses ProfileError, ModelSpecError, WeightsError, DataError,
            DeviceError, OutputError, CaptureError (no capture method takes the model), ...
        GateFailure: (exit 3) a validation gate failed; ``results`` holds the build's results.
    """
    request = BuildRequest(target=target, model=model, input_shape=input_shape,
                           out=Path(out) if out else None,
                           devices_file=Path(devices_file) if devices_file else None,
                           device_names=list(devices or []), trust_weights=trust_weights,
                           debug=debug, quiet=quiet, resume=resume, remeasure=remeasure, db=db, no_wait=no_wait,
                           variants=variants)
    return _run_build(request)


def build_module(module: torch.nn.Module,
                 example_inputs: torch.Tensor | tuple[torch.Tensor, ...] | dict[str, torch.Tensor], *,
                 target: str, calibration: object = None, evaluation: object = None,
                 labels: list[str] | str | Path | None = None, task: str | None = None, name: str | None = None,
                 preprocess: dict[str, object] | None = None, out: str | Path | None = None,
                 devices_file: str | Path | None = None, devices: list[str] | None = None, quiet: bool = False,
                 debug: bool = False, resume: bool = False, remeasure: bool = False, db: str | None = None,
                 no_wait: bool = False, variants: list[str] | None = None) -> Results:
    """Build ``module`` for ``target`` as :func:`build` builds a model spec file: the same pipeline and
    stage cache, the eager reference timed in its own process, the same gates, reports and results.

    The module is saved whole (cloudpickle, so classes defined in a notebook or ``__main__`` come along)
    and the data as .npz files, into a folder of the stage cache keyed by their sha256: the same module
    and data reuse every stage of an earlier build; a changed weight, ``forward`` or sample does not.
    Each process that loads the saved module checks its sha256 first.

    Args:
        module: the float model, a ``torch.nn.Module`` (put in eval mode for the build; not changed).
        example_inputs: one tensor, a tuple of tensors (one per ``forward`` argument) or a dict
            ``{input name: tensor}``. They give the inputs' names (``input``; ``input_0``, ``input_1``, ...
            for several; a dict's keys), shapes (batch first: the artifacts' batch) and dtypes (float32,
            float16, int64, int32, uint8, bool); integer inputs also the range of random values.
        target: a profile: a built-in name (``host``, ``android``, ...) or a profile file's path.
        calibration: samples for static int8: a ``DataLoader`` or any iterable of batches or single
            samples (a tensor, ``(inputs..., label)``, or a dict ``{input name: array, "y": labels}``),
            an array or tensor ``[N, ...]`` of every sample, such a dict, or an .npz / image folder
            path. An iterable is read up to the profile's ``[calibration] samples``. None: seeded random
            inputs (the int8 variants' notes say so).
        evaluation: the samples accuracy is measured on, in the same forms; labels (a DataLoader's second
            element, a dict's ``"y"``) give top-1. Read up to the profile's ``[evaluation] samples``. None:
            seeded random inputs (agreement with the float model, no top-1).
        labels: class names in class index order (a list of strings, or a labels file's path).
        task: how outputs are judged (``classification`` by default, ``detection``, ``segmentation``,
            ``embedding``, ``generic``), as a model spec's ``task``.
        name: the model's name in output paths; default: the module's class name.
        preprocess: a model spec's ``[preprocess]`` table as a dict, for an image folder path as data.
        out: the build folder; default ``artifacts/<target>/<name>``.
        devices_file: a ``devices.toml`` naming where to measure; without it only the built-in devices.
        devices: device names to measure on; default the profile's ``devices``, else ``host``.
        quiet: no progress lines.
        debug: tracebacks, and stop at the first lowering error.
        resume: reuse the measurements of the folder's results.json and say what is reused.
        remeasure: measure every variant again, even when its artifact and settings are unchanged.
        db: the results store's URL; default ``$EDGESHIP_DB``, else ``sqlite:///artifacts/results.db``.
        no_wait: when another build is using ``out``, stop (OutputError) instead of waiting for it.
        variants: build only these variants of the profile (and the eager reference), as
            ``edgeship build --variant``; None: every variant.

    Returns:
        The build's :class:`~edgeship.results.Results` (also written to ``out``'s results.json).

    Raises:
        ModelSpecError: (exit 2) ``module`` is not a ``torch.nn.Module``, cannot be pickled, or its
            ``forward`` does not take the example inputs; ``example_inputs`` are not tensors of a dtype
            listed above.
        DataError: (exit 2) ``calibration`` or ``evaluation`` is not one of the forms above, yields
            something else, holds samples of another shape than the example inputs', or non-finite values.
        GateFailure: (exit 3) a validation gate failed; the artifacts and reports are written and the
            exception carries the results.
    """
    from edgeship.cache import default_cache
    from edgeship.objects.materialize import materialize
    from edgeship.profile import load_profile
    from edgeship.progress import Progress

    with Progress(quiet).step("module and data for the build") as status:
        made = materialize(module, example_inputs, load_profile(target), default_cache(), calibration=calibration,
                           evaluation=evaluation, labels=labels, task=task, name=name, preprocess=preprocess)
        status["result"] = (f"{made.bytes / (1 << 20):.2f} MiB in {made.folder}"
                            + (" (the same as an earlier build's)" if made.reused else ""))
    request = BuildRequest(target=target, spec=made.spec, out=Path(out) if out else None,
                           devices_file=Path(devices_file) if devices_file else None,
                           device_names=list(devices or []), debug=debug, quiet=quiet, resume=resume,
                           remeasure=remeasure, db=db, no_wait=no_wait, variants=variants)
    return _run_build(request)


def matrix(file: str | Path, out: str | Path, *, ray: str | None = None, db: str | None = None,
           num_cpus: float | None = None, quiet: bool = False) -> MatrixRun:
    """Build every (model, target) of a matrix file and measure each on its devices, one after
    another here or (``ray``: "auto" or a cluster address) as Ray tasks; each build's folder lands
    under ``out`` as ``build`` writes it, then matrix.md and matrix.json. Bad input: MatrixError
    (exit 2), before the first build. A build that fails is reported in the run, not raised.

    Args:
        file: the matrix file (models, targets, devices; see examples/matrix.toml).
        out: the folder for the builds (``<out>/<target>/<model>/``) and the report.
        ray: None: one build after another here; ``"auto"``: ``$RAY_ADDRESS``, else a local cluster
            started here; or a cluster address (``ray://head:10001``, ``head:6379``).
        db: the results store every build records into; on a cluster, a PostgreSQL URL.
        num_cpus: CPUs each build task asks Ray for; default the file's ``num_cpus``, else 1.
        quiet: no progress lines.

    Returns:
        The run: each build's outcome, the report's path, the engine and the time taken.
    """
    from edgeship.matrix.run import run_matrix
    from edgeship.matrix.spec import load_matrix

    say = (lambda _line: None) if quiet else (lambda text: print(text, flush=True))
    loaded = load_matrix(file)
    if num_cpus is not None:
        loaded.num_cpus = num_cpus
    return run_matrix(loaded, Path(out), ray=ray, db=db, say=say)


def cache_info() -> tuple[Path, int, int]:
    """The stage cache's folder (``$EDGESHIP_CACHE_DIR``, else ``artifacts/.cache``), its number of
    entries and their size in bytes.

    Raises:
        OutputError: (exit 2) the folder holds files edgeship did not write and is not an edgeship cache.
    """
    from edgeship.cache import default_cache

    summary = default_cache().info()
    return summary.root, summary.entries, summary.bytes


def cache_clear() -> CacheSummary:
    """Delete the stage cache's entries (every build then starts cold): only what edgeship wrote
    there; anything else is kept and listed.

    Returns:
        The folder, the entries and bytes deleted, and what was kept and why.

    Raises:
        OutputError: (exit 2) the folder is not an edgeship cache; it is left as it is.
    """
    from edgeship.cache import default_cache

    return default_cache().clear()


def store_upgrade(db: str | None = None) -> Upgrade:
    """Migrate the results store to the newest schema revision this edgeship knows: the only command
    that migrates a store (builds and reports never do).

    Args:
        db: the store's URL; None: ``$EDGESHIP_DB``, else ``sqlite:///artifacts/results.db``.

    Returns:
        The store's URL and its revision before (None: it was empty) and after.

    Raises:
        StoreError: (exit 2) a store of a newer edgeship, or one that cannot be reached.
    """
    from edgeship.store import upgrade_store

    return upgrade_store(db)


def devices(devices_file: str | Path | None = None) -> DeviceSet:
    """The devices a devices file defines, and the built-in ones (``host`` always).

    Args:
        devices_file: a ``devices.toml``; None: the built-in devices only.

    Raises:
        DeviceError: (exit 2) a devices file that cannot be read or is not valid.
    """
    from edgeship.devices.listing import device_set

    return device_set(devices_file)


def check_device(name: str, devices_file: str | Path | None = None) -> DeviceReport:
    """Reach device ``name`` and report its OS, architecture, Python, which runtimes import and its free disk.

    Args:
        name: a device of ``devices_file`` or a built-in one.
        devices_file: the ``devices.toml`` that defines it.

    Returns:
        What was found; ``reachable`` False with ``error`` when the device could not be reached.

    Raises:
        DeviceError: (exit 2) no such device, or a bad devices file.
    """
    return devices(devices_file).device(name).check()


def setup_device(name: str, devices_file: str | Path | None = None) -> Path:
    """Prepare what device ``name`` runs in: an emulated aarch64 device's root folder (made once,
    kept under ~/.cache/edgeship).

    Returns:
        The root folder's path.

    Raises:
        DeviceError: (exit 2) the device needs no setup (only ``transport = "qemu"``, ``arch = "aarch64"``
            does), or does not exist.
    """
    from edgeship.devices import armroot
    from edgeship.devices.qemu import QemuDevice
    from edgeship.errors import DeviceError
    from edgeship.progress import console

    device = devices(devices_file).device(name)
    if not (isinstance(device, QemuDevice) and device.arm):
        raise DeviceError(f"device {name!r} needs no setup: `edgeship devices setup` prepares an emulated aarch64 "
                          "device (transport = \"qemu\", arch = \"aarch64\"), such as arm64-emulated")
    return armroot.setup(device.root, lambda line: console.print(line, markup=False), device.qemu)


def report(results: list[str | Path] | None = None, *, db: str | None = None, out: str | Path | None = None,
           model: str | None = None, target: str | None = None, threshold_pct: float = 10.0,
           top1_tolerance: float = 0.0, fail_on_regression: bool = False) -> WrittenReport:
    """Write report.md, report.html and results.csv for results files and/or the results store.

    Compares the same artifact across devices and each (variant, device) across builds. With
    ``fail_on_regression``, raises GateFailure (exit 3) after writing when the last build is
    slower than the one before by more than ``threshold_pct`` or its top-1 is lower by more than
    ``top1_tolerance`` points. Bad files or options raise ReportError (exit 2).

    Args:
        results: results.json files (one build each).
        db: a results store's URL to read builds from and compare against.
        out: the output folder; default the results file's folder, or ``artifacts/report``.
        model: only this model's rows from the store.
        target: only this target's rows from the store.
        threshold_pct: a p50 slower than the previous build's by more than this is a regression.
        top1_tolerance: a top-1 lower by more than this many points is a regression.
        fail_on_regression: raise GateFailure when a regression is found (after writing).

    Returns:
        The files written and the comparison, regressions included.
    """
    from edgeship.errors import GateFailure
    from edgeship.reports import make_report

    written = make_report([Path(p) for p in results or []], Path(out) if out else None, db, model, target,
                          threshold_pct, top1_tolerance)
    if fail_on_regression and written.regressions:
        raise GateFailure(f"{len(written.regressions)} regression(s): " + "; ".join(written.regressions))
    return written


def bundle(target: str, model: str | None = None, *, input_shape: str | None = None,
           out: str | Path | None = None, platforms: list[str] | None = None,
           variants: str | None = None) -> list[Bundle]:
    """Bundle a finished build (found as ``build`` writes it) for the profile's or given platforms.

    ``variants``: "passing", "fastest" or comma-separated names. Raises BundleError (exit 2) when
    the build, the settings or the selection cannot be used.

    Args:
        target: the build's profile, as :func:`build` was given it.
        model: the build's model spec, as :func:`build` was given it.
        input_shape: a ``module:callable`` model's input shape, as :func:`build` was given it.
        out: the build's folder; default ``artifacts/<target>/<model name>``, where :func:`build` writes.
        platforms: ``android``, ``ios``, ``jetson``, ``web``, ``linux``, ``x86``; default the profile's.
        variants: which variants go in; default the profile's ``[bundle]`` choice.

    Returns:
        One bundle per platform: its zip, how its variants were chosen, a web bundle's unpacked folder.
    """
    from edgeship.bundle import make_bundles
    from edgeship.bundle.request import bundle_inputs
    from edgeship.pipeline.output import BuildFolder

    inputs = bundle_inputs(target, model, input_shape, out, platforms, variants)
    # Bundles are written into the build's folder: never while a build is changing it.
    with BuildFolder(inputs.build_dir).held(True, lambda line: print(line, file=sys.stderr), [], clean=False):
        return make_bundles(inputs)


def verify_bundle(path: str | Path, *, public_key: str | Path | None = None,
                  signature: str | Path | None = None) -> BundleCheck:
    """Check a bundle zip, or a web bundle's unpacked folder in place, against its manifest
    (BundleError, exit 2, naming the file that differs).

    With ``public_key`` (PEM or OpenSSH Ed25519), the detached signature (``signature``, default
    ``<bundle>.sig``; for a folder its zip's, ``<folder>.zip.sig``) is checked too: missing, bad or made
    by another key is a BundleError. Without it, the check is integrity only (``BundleCheck.authenticity``
    says so).

    Returns:
        What the bundle holds (platform, files, bytes, manifest) and which signature was checked.

    Raises:
        BundleError: (exit 2) a file that differs from the manifest; a missing or bad signature.
    """
    from edgeship.bundle import verify_bundle as _verify

    return _verify(Path(path), public_key=_path(public_key), signature=_path(signature))


def extract_bundle(path: str | Path, dest: str | Path, *, public_key: str | Path | None = None,
                   signature: str | Path | None = None) -> BundleCheck:
    """Check a bundle (and its signature with ``public_key``), then extract it into ``dest``.

    Returns:
        The checked bundle, as :func:`verify_bundle` returns it.

    Raises:
        BundleError: (exit 2) what :func:`verify_bundle` refuses, entries whose paths leave ``dest``,
            limits exceeded, or existing files in ``dest`` that would change.
    """
    from edgeship.bundle import extract_bundle as _extract

    return _extract(Path(path), Path(dest), public_key=_path(public_key), signature=_path(signature))


def sign_bundle(path: str | Path, key: str | Path, *, signature: str | Path | None = None) -> Signed:
    """Check a bundle, then sign its manifest with an Ed25519 private key (PEM or OpenSSH) into a
    detached signature file (``signature``, default ``<bundle>.sig``).

    Returns:
        The signature's path and the signing key's id.

    Raises:
        BundleError: (exit 2) a bundle that does not check out, or a key that cannot be used.
        OutputError: (exit 2) the signature file exists (never overwritten) or cannot be written.
    """
    from edgeship.bundle import sign_bundle as _sign

    return _sign(Path(path), Path(key), signature=_path(signature))


def bundle_keygen(out: str | Path) -> tuple[Path, Path, str]:
    """A new Ed25519 signing key: ``out`` (private, PEM, mode 0600) and ``out.pub`` (public, PEM).

    Returns:
        The private key's path, the public key's path, and the key id.

    Raises:
        OutputError: (exit 2) either file exists (it is never overwritten) or cannot be written.
    """
    from edgeship.bundle import generate_keypair

    return generate_keypair(Path(out))


def targets() -> list[TargetEntry]:
    """Every profile ``build --target NAME`` accepts, by name: the working folder's ``targets/*.toml`` (a
    project's own; a name there hides the built-in profile of that name) and edgeship's built-in ones,
    each read and checked as a build reads it (one that does not load carries its error)."""
    from edgeship.profile.listing import list_targets

    return list_targets()


def target(name: str) -> dict[str, Any]:
    """Profile ``name`` (or a profile file's path) as a build uses it: every setting, defaults filled in
    (null: unset), each variant's backend options, gates and capture methods resolved. ProfileError
    (exit 2) for a name no profile has, listing the known ones, or a profile that does not load."""
    from edgeship.profile import load_profile
    from edgeship.profile.listing import resolved

    return resolved(load_profile(name))


def _path(value: str | Path | None) -> Path | None:
    return Path(value) if value is not None else None
