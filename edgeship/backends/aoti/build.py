"""Device-side AOTInductor compiler: an exported program (``torch.export.save``) -> an AOTInductor
package for this machine's CPU.

    python aoti_build.py model.pt2 [model.aoti.pt2]      # on the device

AOTInductor does not cross-compile: a package is native code for the machine that compiles it. So
for a device of another architecture (options.compile_on = "device") edgeship's aoti backend ships
the exported program, with the compile settings inside the archive (``extra/edgeship_aoti.json``),
and the runner compiles it on the device at its first run with this file, keeping the package
beside the artifact for later runs. Needs the standard library, torch and a C++ compiler (g++, or
``$CXX``). It is shipped beside runner.py as aoti_build.py, with its siblings cpu.py and hashing.py,
and imports nothing of edgeship there; no f-strings, for the device Pythons torch supports.

Settings: isa (``native`` or an x86 level), march (-march; null: native), simdlen (Inductor's
cpp.simdlen; null: its default), flags (the CPU flags the level needs; empty for native: this CPU's
own), freezing, threads (null: set at run time), max_autotune.

The package's metadata (its wrapper_metadata.json, read by runner.py without loading any code):
edgeship.cpu_flags (the flags its code needs), edgeship.isa, edgeship.source_sha256 (the exported
program it was compiled from: a package made from another artifact is never reused) and
edgeship.torch (the torch that compiled it).

Inductor's on-disk cache holds code it compiles and loads without checking: its default is a fixed
name in the temporary folder (``/tmp/torchinductor_<user>``), which another user can make first,
with kernels of theirs in it. So a compile here uses ``$TORCHINDUCTOR_CACHE_DIR`` only when the user
set it (not torch, which sets it to that default when torch._dynamo is imported) to a folder of
theirs that nobody else can write to, and otherwise a new folder of its own (random name, mode
0700), removed after; and Inductor's precompiled headers, kept under that fixed name whatever the
cache folder is, are turned off.
"""
import contextlib
import importlib
import json
import os
import shutil
import stat
import sys
import tempfile
import zipfile

SETTINGS_FILE = "edgeship_aoti.json"  # the extra file of the exported program's archive
DEFAULTS = {"isa": "native", "march": None, "simdlen": None, "flags": [], "freezing": True, "threads": None,
            "max_autotune": False}
# gcc's -m options in Inductor's vector-ISA flags -> Linux's cpuinfo names.
GCC_FLAGS = {"avx2": "avx2", "fma": "fma", "avx512f": "avx512f", "avx512dq": "avx512dq", "avx512vl": "avx512vl",
             "avx512bw": "avx512bw", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
             "amx-tile": "amx_tile", "amx-bf16": "amx_bf16", "amx-int8": "amx_int8", "amx-fp16": "amx_fp16",
             "avx512fp16": "avx512_fp16"}
NO_COMPILER = "AOTInductor needs a C++ compiler on the device: apt-get install g++"
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# Inductor's header precompiling (AOT and JIT): the headers live in torchinductor_<user> under the
# temporary folder whatever CACHE_ENV says, and a header found there is compiled into the package.
PRECOMPILED_HEADERS = (("aot_inductor", "precompile_headers"), (None, "cpp_cache_precompile_headers"))


def sibling(name):
    """A module the runner ships beside this file (cpu, hashing): edgeship.devices' own on the host,
    imported by folder on a device, where this file runs alone (as aoti_build.py)."""
    if __package__:
        return importlib.import_module("edgeship.devices.%s" % name)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(here)


def is_package(path):
    """Whether the archive at ``path`` is an AOTInductor package (compiled code under
    ``data/aotinductor/``), not an exported program."""
    with zipfile.ZipFile(path) as archive:
        return any("/data/aotinductor/" in "/" + name for name in archive.namelist())


def read_settings(path):
    """The compile settings an exported program's archive carries (DEFAULTS where it has none)."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith("/extra/" + SETTINGS_FILE):
                return dict(DEFAULTS, **json.loads(archive.read(name).decode("utf-8")))
    return dict(DEFAULTS)


def vec_isa_flags(arch_flags):
    """The CPU flags behind Inductor's vector-ISA compiler flags (``-mavx512f -mavx512vnni ...``)."""
    names = [part[2:] for part in arch_flags.split() if part.startswith("-m")]
    return tuple(GCC_FLAGS[name] for name in names if name in GCC_FLAGS)


def inductor_configs(settings):
    """Inductor's configs for the settings, the CPU flags the package needs (the level's and those of
    the vector ISA Inductor picks for it on this machine) and that vector ISA's name."""
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    settings = dict(DEFAULTS, **settings)
    configs = {"freezing": settings["freezing"], "max_autotune": settings["max_autotune"],
               "cpp.dynamic_threads": settings["threads"] is None}
    for group, name in PRECOMPILED_HEADERS:
        if hasattr(getattr(config, group) if group else config, name):  # older torch: no such setting, no headers
            configs[name if group is None else "%s.%s" % (group, name)] = False
    if settings["threads"]:
        configs["cpp.threads"] = settings["threads"]
    if settings["march"]:
        configs["cpp.march"] = settings["march"]
    if settings["simdlen"] is not None:
        configs["cpp.simdlen"] = settings["simdlen"]
    with config.patch({"cpp.simdlen": settings["simdlen"]}):
        vec = pick_vec_isa()
    vector_flags = vec_isa_flags(vec.build_arch_flags()) if vec else ()
    required = sorted(set(settings["flags"]) | set(vector_flags))
    configs["aot_inductor.metadata"] = {"edgeship.cpu_flags": ",".join(required), "edgeship.isa": settings["isa"]}
    return configs, required, str(vec) if vec else "scalar"


def user_cache():
    """CACHE_ENV as the user set it, or None: unset, or set by torch itself to its default (importing
    torch._dynamo does that, and makes the folder)."""
    given = os.environ.get(CACHE_ENV)
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return given
    return None if not given or os.path.abspath(given) == os.path.abspath(default_cache_dir()) else given


@contextlib.contextmanager
def private_cache():
    """Inductor's on-disk cache, for the compile inside the block, in a folder only this user controls:
    the one the user set (RuntimeError when another user could write there), else a new folder,
    removed after the block."""
    given, before = user_cache(), os.environ.get(CACHE_ENV)
    if given:
        problem = folder_problem(given)
        if problem:
            raise RuntimeError("Inductor's cache folder ($%s) %s %s: another user could have put compiled code "
                               "there; use a folder of yours that nobody else can write to (mode 0700)"
                               % (CACHE_ENV, given, problem))
        yield given
        return
    folder = tempfile.mkdtemp(prefix="aoti-inductor-")
    os.environ[CACHE_ENV] = folder
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def folder_problem(path):
    """Why another local user could control the folder ``path`` (a link, not a folder, someone else's,
    writable by its group or everyone), or None; a missing one is made (mode 0700). The device-side
    twin of edgeship.fsutil.folder_problem."""
    try:
        os.makedirs(path, mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a folder"
    if st.st_uid not in (os.geteuid(), 0):
        return "is owned by uid %d, not by you" % st.st_uid
    if st.st_mode & 0o022:
        return "is writable by others (mode %04o)" % stat.S_IMODE(st.st_mode)
    return None


def missing_compiler():
    """NO_COMPILER, naming what was looked for, when none of the C++ compilers Inductor would call is
    installed; None when one is."""
    from torch._inductor import config

    names = [cxx for cxx in config.cpp.cxx if cxx]
    if any(shutil.which(cxx) for cxx in names):
        return None
    return "%s (%s not found; or set CXX)" % (NO_COMPILER, ", ".join(names) or "g++")


def compile_program(program, package_path, configs):
    """aoti_compile_and_package with grad mode off: Inductor applies ``freezing`` (weights folded and
    prepacked, conv+bn+relu fused into oneDNN calls) only when grad is disabled; with it on, the
    package calls plain aten convolutions on unfolded weights, whatever the config says."""
    import torch
    from torch._inductor import aoti_compile_and_package

    with torch.no_grad():
        return aoti_compile_and_package(program, package_path=package_path, inductor_configs=configs)


def build_package(exported_path, settings, dest):
    """Compile the exported program at ``exported_path`` with ``settings`` for this machine's CPU into
    an AOTInductor package at ``dest`` (written atomically); returns the package's metadata."""
    import torch
    from torch._inductor import exc

    problem = missing_compiler()
    if problem:
        raise RuntimeError(problem)
    settings = dict(DEFAULTS, **settings)
    if settings["isa"] == "native":  # -march=native: the code may use every extension of this CPU
        settings["flags"] = (sibling("cpu").cpu_facts() or {}).get("flags") or []
    folder, name = os.path.split(os.path.abspath(dest))
    work = tempfile.mkdtemp(prefix=".%s.tmp-" % name, dir=folder)  # beside dest: os.replace stays on one disk
    try:
        with private_cache():  # around inductor_configs too: picking the vector ISA compiles into the cache
            configs, required, vec = inductor_configs(settings)
            configs["aot_inductor.metadata"].update({"edgeship.source_sha256": sibling("hashing").sha256_path(
                exported_path), "edgeship.torch": torch.__version__, "edgeship.vec_isa": vec})
            tmp = os.path.join(work, name)  # the archive's folder is named after the file
            compile_program(torch.export.load(exported_path), tmp, configs)
        os.replace(tmp, dest)
    except exc.InvalidCxxCompiler:
        raise RuntimeError(NO_COMPILER) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return configs["aot_inductor.metadata"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print("usage: aoti_build.py EXPORTED.pt2 [PACKAGE.pt2]", file=sys.stderr)
        return 2
    dest = argv[1] if len(argv) == 2 else os.path.splitext(argv[0])[0] + ".aoti.pt2"
    metadata = build_package(argv[0], read_settings(argv[0]), dest)
    print("built %s (needs %s)" % (dest, metadata["edgeship.cpu_flags"] or "no extension"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
