"""AOTInductor's runner: a ``.pt2`` package, or an exported program compiled here first (build.py).

Device-side: shipped beside runner.py as aoti_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.aoti.device.
"""
import importlib
import json
import os
import platform
import time

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


class AotiRunner(runner.TorchRunner):
    """An AOTInductor ``.pt2`` package, loaded by torch._inductor.aoti_load_package (the Python side of
    AOTIModelPackageLoader). Refused, before its code is loaded, on a CPU lacking a flag the package
    was compiled for (its metadata's ``edgeship.cpu_flags``): it would die of an illegal instruction.

    An exported program instead (options.compile_on = "device") is compiled into a package here
    first, with aoti_build.py, or the one compiled from it by an earlier run is reused
    (``aoti_package_for``). That happens when the runner is made, before start() starts the load
    timer: load_ms stays the package's load, and the compile's time goes into the notes."""

    runtime = "aoti"
    imports = ("torch", "torch._inductor")

    def __init__(self, path, options, threads):
        super().__init__(path, options, threads)
        self.package, self.compile_notes = aoti_package_for(path)

    def load(self):
        import torch

        self.notes = self.compile_notes + check_package_cpu(aoti_metadata(self.package), runner.cpu_facts())
        self.set_threads()
        self.use(torch._inductor.aoti_load_package(self.package))
        self.version = "torch %s AOTInductor" % torch.__version__.split("+")[0]


def aoti_package_for(path):
    """The package to load for the artifact at ``path``, and notes: the artifact itself when it is a
    package; for an exported program, the package beside it (``<name>.aoti.pt2``), reused when it
    can stand in for this artifact here (``stale_package``), else compiled here with aoti_build.py."""
    aoti_build = runner.companion(__name__, "build")
    if aoti_build.is_package(path):
        return path, []
    package = os.path.splitext(os.path.abspath(path))[0] + ".aoti.pt2"
    stale = stale_package(package, runner.sha256_path(path))
    if stale is None:
        return package, ["package reused: %s, compiled on this device from this artifact" % os.path.basename(package)]
    began = time.perf_counter()
    try:
        aoti_build.build_package(path, aoti_build.read_settings(path), package)
    except TimeoutError as e:
        raise TimeoutError("%s, compiling the AOTInductor package (the first run on a device compiles it): "
                           "raise [latency] timeout_s in the profile" % e) from None
    return package, ["package compiled on this device in %.1f s (%s)" % (time.perf_counter() - began, stale),
                     "rss_over_baseline_mb includes compiling the package here (after the runtime's import, before "
                     "the load): a run that reuses the package shows the runtime's memory alone"]


def stale_package(package, source_sha256):
    """Why the package at ``package`` cannot stand in for the exported program whose sha256 is
    ``source_sha256`` on this device (None: it can): none there, made from another artifact (the
    sha256 its metadata records) or by another torch, or compiled for a CPU this one is not."""
    import torch

    if not os.path.exists(package):
        return "none compiled here before"
    try:
        metadata = aoti_metadata(package)
    except Exception as e:  # a truncated or foreign file: compile again over it
        return "the one there is unreadable (%s)" % e
    if metadata.get("edgeship.source_sha256") != source_sha256:
        return "the one there was made from another artifact"
    if metadata.get("edgeship.torch") != torch.__version__:
        return "the one there was compiled by torch %s" % metadata.get("edgeship.torch")
    try:
        check_package_cpu(metadata, runner.cpu_facts())
    except RuntimeError as e:
        return "the one there does not run here: %s" % e
    return None


def aoti_metadata(path):
    """The metadata an AOTInductor package carries (AOTI_MACHINE, AOTI_CPU_ISA, edgeship.cpu_flags ...),
    read from the archive without loading its code; {} when it has none."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith("wrapper_metadata.json"):
                return json.loads(archive.read(name).decode("utf-8"))
    return {}


def check_package_cpu(metadata, facts):
    """Raise when this CPU cannot run the package (another architecture, a missing flag, named);
    return notes (what was checked, or why it could not be)."""
    needed = [f for f in (metadata.get("edgeship.cpu_flags") or "").split(",") if f]
    machine = (metadata.get("AOTI_MACHINE") or "").lower()
    here = (platform.machine() or "").lower()
    if machine and here and machine != here and not {machine, here} <= {"x86_64", "amd64"}:
        raise RuntimeError("this AOTInductor package was compiled for %s; this device is %s" % (machine, here))
    if not needed:
        return ["the package names no CPU flags it needs (not built by edgeship?): not checked"]
    if not facts or facts.get("source") == "unknown" or not facts.get("flags"):
        return ["this CPU's flags could not be read: the package's needs (%s) were not checked" % ", ".join(needed)]
    lacking = [f for f in needed if f not in facts["flags"]]
    if lacking:
        raise RuntimeError("this AOTInductor package was compiled for a CPU with %s; this CPU (%s) lacks %s and "
                           "would stop with an illegal instruction: rebuild it with options.isa = \"auto\" for "
                           "this device, or a level it has" % (", ".join(needed), facts.get("model") or "model unknown",
                                                               ", ".join(lacking)))
    # the flags are in the package's metadata (and, compiled by the build, in lowering.details.cpu_flags_required)
    return ["the package's CPU needs (%s, %d flags) checked against this CPU: all present"
            % (metadata.get("edgeship.isa", "?"), len(needed))]
