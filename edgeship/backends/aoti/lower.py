"""AOTInductor: an exported program compiled ahead of time into a ``.pt2`` package (C++ kernels,
a wrapper shared library and the weights) that LibTorch C++ loads with
``torch::inductor::AOTIModelPackageLoader`` and Python with ``torch._inductor.aoti_load_package``.

The package is native code for one architecture and instruction set, and AOTInductor does not
cross-compile, so it is compiled where ``options.compile_on`` says (``backends/aoti/cpu.py``):

- here (``build``), for the level chosen from the target CPUs; the CPU flags it needs go into the
  package's metadata (``edgeship.cpu_flags``) and the runner refuses it on a CPU lacking one;
- on each device (``device``; ``auto`` for a target of another architecture): the artifact is then
  the exported program (``torch.export.save``, an ExportedProgram archive, not a package) with the
  compile settings inside it (``extra/edgeship_aoti.json``), and the runner compiles it on the
  device at its first run with ``backends/aoti/build.py``, keeping the package beside it for the next
  runs. That first run's compile (tens of seconds for resnet18 on an x86 core, minutes on a Jetson)
  counts against the job's timeout, ``[latency] timeout_s``.

Inductor's own loops run with the thread count set at run time unless ``options.threads``
compiles one in. Compiling runs with grad mode off, without which Inductor ignores ``freezing``
(``build.compile_program``). int8 (``backends/aoti/quantize.py``) is compiled here, frozen, and
refused unless the package calls oneDNN int8 kernels. The kernels a package calls are read from its
generated wrapper (``package_calls``) into ``details["kernels"]``.

Inductor's on-disk cache holds code it compiles and then loads, trusted as found: compiling here
uses ``$TORCHINDUCTOR_CACHE_DIR`` when the user set it and otherwise ``~/.cache/edgeship/inductor``
(not Inductor's default, ``/tmp/torchinductor_<user>``, a name another user can take first), either
one only when it is a folder of this user's that nobody else can write to
(``private_inductor_cache``); build.py turns off the precompiled headers Inductor keeps under that
default name whatever the cache folder is.
"""
from __future__ import annotations

import json
import os
import platform
import re
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from edgeship import outputs
from edgeship.backends.aoti import build as aoti_build
from edgeship.backends.aoti.cpu import IsaChoice, choose_isa, compile_where, cxx_version, missing_flags
from edgeship.backends.aoti.quantize import checked_int8, quantize_x86
from edgeship.backends.aoti.spec import AotiSpec
from edgeship.backends.base import Artifact, Backend, LowerRequest, Predict
from edgeship.backends.spec import TargetCpu
from edgeship.devices.cpu import cpu_facts
from edgeship.devices.lock import user_folder
from edgeship.errors import LoweringError
from edgeship.fsutil import atomic_output, private_folder
from edgeship.lowering.capture import check_sizes

if TYPE_CHECKING:
    import torch

DEVICE_NOTE = ("the artifact is the exported program: each device compiles it for its own CPU at its first run "
               "(aoti_build.py beside the runner; needs torch and g++ there) and reuses the package after; that "
               "compile counts against [latency] timeout_s")


class AotiBackend(AotiSpec, Backend):
    """Compiles the ``export`` capture with ``aoti_compile_and_package`` for the chosen ISA, or writes
    the exported program for the devices to compile."""

    def lower(self, request: LowerRequest) -> Artifact:
        opts, build = cast(AotiSpec.Options, request.options), cpu_facts()
        targets = request.cpus if request.cpus is not None else [("host", build)]
        where, why = compile_where(opts.compile_on, targets, build)
        if where == "device" and request.variant.precision == "int8":
            raise LoweringError(f"aoti int8 is compiled on this machine only ({why}): its quantizer targets "
                                "x86 oneDNN kernels, and the package is checked for them here")
        choice = choose_isa(opts.isa, targets, build, where)
        if where == "device":
            return self._write_program(request, choice, why)
        program = cast("torch.export.ExportedProgram", request.captured.program)  # an export capture
        if request.variant.precision != "int8":
            return self._compile_here(request, program, targets, choice, why)
        program, quantized = quantize_x86(request)
        artifact = self._compile_here(request, program, targets, choice, why)
        try:
            kernels = checked_int8(artifact.details["kernels"])
        except LoweringError:
            request.dest.unlink(missing_ok=True)  # not an int8 artifact: nothing is left to ship
            raise
        artifact.details["quantization"] = quantized.details
        artifact.notes[:0] = quantized.notes
        artifact.notes.append("oneDNN int8 kernels in the package: "
                              + ", ".join(f"{name} x{n}" for name, n in sorted(kernels.items())))
        return artifact

    def _compile_here(self, request: LowerRequest, program: torch.export.ExportedProgram,
                      targets: list[TargetCpu], choice: IsaChoice, why: str) -> Artifact:
        opts = cast(AotiSpec.Options, request.options)
        path, compiler = cxx_version()
        if path is None:
            raise LoweringError(f"AOTInductor compiles C++ and the compiler is missing here ({compiler}): "
                                "apt-get install g++, or set CXX")
        private_inductor_cache()  # before inductor_configs: picking the vector ISA compiles into the cache
        configs, required, vec = aoti_build.inductor_configs(compile_settings(opts, choice))
        for name, facts in targets:
            lacking = missing_flags(required, facts)
            if lacking:
                raise LoweringError(f"Inductor's vector code for this build CPU ({vec}) needs {', '.join(lacking)}, "
                                    f"which device {name} lacks: set options.isa to a lower level")
        # Inductor names the archive's top folder after the file: compile to the final name in a folder
        # of its own, then move it into place.
        with atomic_output(request.dest) as tmp, \
                tempfile.TemporaryDirectory(prefix=".aoti-", dir=request.dest.parent) as work:
            named = Path(work) / request.dest.name
            aoti_build.compile_program(program, str(named), configs)
            os.replace(named, tmp)
        details = {"compile_on": "build", "compile_on_why": why, "isa": choice.level, "isa_why": choice.why,
                   "march": choice.march or "native", "vec_isa": vec, "cpu_flags_required": required,
                   "build_cpu": cpu_facts().get("model"), "arch": platform.machine(), "compiler": compiler,
                   "threads": opts.threads or "set at run time", "freezing": opts.freezing,
                   "kernels": package_calls(request.dest)}
        notes = [f"compiled for {choice.level} ({choice.why}); needs {', '.join(required) or 'no extension'}"]
        if request.captured.dynamic:
            notes.append(check_sizes(request.captured, self.load(request.dest, opts), request.variant.precision))
        return Artifact(request.dest, notes, details)

    def _write_program(self, request: LowerRequest, choice: IsaChoice, why: str) -> Artifact:
        """The exported program with its compile settings inside, for each device to compile; checked
        at the spec's sizes by running the saved program (not compiled here)."""
        import torch

        opts = cast(AotiSpec.Options, request.options)
        settings = compile_settings(opts, choice)
        with atomic_output(request.dest) as tmp:
            torch.export.save(cast(torch.export.ExportedProgram, request.captured.program), str(tmp),
                              extra_files={aoti_build.SETTINGS_FILE: json.dumps(settings, sort_keys=True)})
        details = {"compile_on": "device", "compile_on_why": why, "isa": choice.level, "isa_why": choice.why,
                   "compile_settings": settings, "threads": opts.threads or "set at run time",
                   "freezing": opts.freezing}
        notes = [f"compiled on the device ({why}), for {choice.level} ({choice.why})", DEVICE_NOTE]
        if request.captured.dynamic:
            module = torch.export.load(str(request.dest)).module()
            notes.append("the exported program " + check_sizes(request.captured, torch_predict(module),
                                                               request.variant.precision))
        return Artifact(request.dest, notes, details)


def private_inductor_cache() -> Path:
    """Inductor's on-disk cache for the compiles of this process: ``$TORCHINDUCTOR_CACHE_DIR`` when the
    user set it (not torch, to its default), else ``~/.cache/edgeship/inductor``, made or checked as a
    folder only this user controls (OutputError, exit 2, naming it when not) and set in the environment,
    which Inductor reads at each use."""
    given = aoti_build.user_cache()
    folder = (private_folder(Path(given), f"Inductor's cache folder (${aoti_build.CACHE_ENV})") if given
              else user_folder("inductor"))
    os.environ[aoti_build.CACHE_ENV] = str(folder)
    return folder


def compile_settings(opts: AotiSpec.Options, choice: IsaChoice) -> dict[str, Any]:
    """What aoti_build.inductor_configs compiles with: the level, its -march, simdlen and flags, and
    the options (freezing, threads, max_autotune)."""
    return {"isa": choice.level, "march": choice.march, "simdlen": choice.simdlen, "flags": list(choice.flags),
            "freezing": opts.freezing, "threads": opts.threads, "max_autotune": opts.max_autotune}


def package_calls(path: Path) -> dict[str, int]:
    """The ATen / oneDNN kernels an AOTInductor package's generated wrapper calls
    (``aoti_torch_cpu_<name>`` shims: ``mkldnn__convolution_pointwise``, ``_qconv_pointwise_tensor``,
    ``convolution`` ...) and how often; Inductor's own fused loops are not among them."""
    calls: dict[str, int] = {}
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith(".wrapper.cpp"):
                for call in re.findall(r"\baoti_torch_cpu_(\w+)\(", archive.read(name).decode("utf-8", "replace")):
                    calls[call] = calls.get(call, 0) + 1
    return dict(sorted(calls.items()))


def torch_predict(module: torch.nn.Module) -> Predict:
    """A callable on numpy arrays running a torch module, outputs flattened (check_sizes' predict)."""
    import torch

    def predict(arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            out = module(*[torch.from_numpy(a) for a in arrays])
        return [v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for _, v in outputs.flatten(out)]
    return predict
