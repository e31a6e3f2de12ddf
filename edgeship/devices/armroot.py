"""The aarch64 user space an emulated Arm device runs in: Debian's arm64 CPython 3.11 and the aarch64
builds of the runtimes that android and jetson artifacts need, in one folder that qemu-user is
pointed at (``qemu-aarch64 -L ROOT ROOT/usr/bin/python3.11 runner.py job.json``).

Made once by ``make setup-arm`` (``edgeship devices setup arm64-emulated``) and checked on every
use: the folder's name carries the hash of the pins below, so a change of pins makes a new folder,
and ``.edgeship-root.json`` inside it is written last, so a folder without it is not a root. It is
made in a new folder beside the root and moved into place when finished; what was at the root's
place goes only when edgeship made it (it carries ``.edgeship-root.json``: a root made for other
pins) or it is an empty folder. Any other folder (``$EDGESHIP_ARM_ROOT`` or a devices.toml ``root =``
naming a folder of the user's, ``root = "."``) is refused, never deleted. The root holds code run as
the user, so one that another user can write to (or owns) is refused too. The wheels are installed
with ``--require-hashes`` (the sha256 of each pinned file) by a pip that imports nothing from the
working folder (``python -I``), the Debian packages are checked by apt's signatures (mmdebstrap).

What is in it, and why these versions (PyPI, aarch64, cp311; looked up on 2026-12-03):

- torch 2.10.0: the newest aarch64 torch wheel that is CPU-only. From 2.11 the aarch64 wheels need
  the CUDA 13 libraries (420-484 MB, and libtorch_cpu itself links libcudart.so.13). It loads the
  lite-interpreter ``.ptl`` files torch 2.14.1 saves (bytecode versions 5 to 8).
- executorch 1.1.0: the newest whose Python runtime links against torch 2.10 (1.2 needs torch 2.11;
  1.5.1's bindings with torch 2.10 fail with "tensor does not have a device"). It runs the ``.pte``
  files executorch 1.5.1 writes on this machine (XNNPACK delegate included).
- onnxruntime 1.32.0, numpy 2.4.6: the versions this machine runs.

Two things qemu 7.2 (Debian bookworm's qemu-user) needs from the folder: ``/proc/cpuinfo`` as an
aarch64 kernel writes it (qemu passes the x86 host's file through, and the cpuinfo library in
onnxruntime, torch and XNNPACK crashes or misreads on it), with the features the emulated CPU
reports in its auxiliary vector (HWCAP), and ``midr_el1`` files under /sys. qemu's ``-L`` prefix
serves both from the folder. The CPU named there is qemu's own (implementer 0x00, part 0x051, as
qemu 10 writes it for ``-cpu max``), never a real core's. The research behind these choices (the
versions tried, a torch 2.14.1 root with the CUDA libraries stubbed, chroot with binfmt_misc):
docs/research/aarch64-emulation.md.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from edgeship.devices.cpu import hwcap_names
from edgeship.devices.lock import user_cache
from edgeship.errors import EdgeshipError, OutputError
from edgeship.fsutil import folder_problem, owner_name, private_folder

DEBIAN = ("bookworm", "http://deb.debian.org/debian", "http://deb.debian.org/debian-security bookworm-security main")
DEBIAN_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "libstdc++6", "libgcc-s1")
PYTHON = "usr/bin/python3.11"
SITE = "usr/lib/python3/dist-packages"  # on Debian's sys.path for python3.11
# (wheel file, sha256): installed with --no-deps (pip judges dependency markers for the x86 host)
# and --require-hashes.
WHEELS = (
    ("torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
     "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"),
    ("executorch-1.1.0-cp311-cp311-manylinux_2_28_aarch64.whl",
     "7da105c9f948d22097196cc88bbadb621c9223f5793e003c9e86b926b67d47f6"),
    ("onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_aarch64.whl",
     "2303372a85299b6757b0e11e1cbf13e410ddf7e10c37f4b37e99d1c90e7daf7c"),
    ("numpy-2.4.6-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl",
     "0ab0a9c4ffb1a6d95ef519fe4247dba8eb6b18ad93999f76b7f657039acabd47"),
    # what torch, onnxruntime and executorch.runtime import
    ("flatbuffers-25.12.19-py2.py3-none-any.whl", "7634f50c427838bb021c2d66a3d1168e9d199b0607e6329399f04846d42e20b4"),
    ("packaging-26.4-py3-none-any.whl", "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2"),
    ("protobuf-7.36.2-cp310-abi3-manylinux2014_aarch64.whl",
     "e11e1f0180583a2af89db6a2ecd9e8dc40aa6d2988ca175bfd0e6d12ea72d74e"),
    ("filelock-4.3.2-py3-none-any.whl", "02a8801bc6b2a80921bf3d7895c63084d53bae2a3c86783adce5ae2b89a1825b"),
    ("typing_extensions-4.16.0-py3-none-any.whl", "481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8"),
    ("sympy-1.14.0-py3-none-any.whl", "e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5"),
    ("mpmath-1.4.1-py3-none-any.whl", "dc4f0ea2304480d4a9a48a94c1020571558ade522b44a6912efac63a586e140f"),
    ("networkx-3.6.1-py3-none-any.whl", "d47fbf302e7d9cbbb9e2555a0d267983d2aa476bac30e90dfbe5669bd57f3762"),
    ("jinja2-3.1.6-py3-none-any.whl", "85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67"),
    ("markupsafe-3.0.4-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
     "849dd2bb0e5e4ab2b71c7191726a4a8d5aa8a610daa584728cbee0b710ddc4ef"),
    ("fsspec-2026.9.0-py3-none-any.whl", "8dd6e646e99ea382bd85f97a45e6b526a442d79423a7dc673f1e2756d05fcb5f"),
    ("ruamel_yaml-0.19.1-py3-none-any.whl", "27592957fedf6e0b62f281e96effd28043345e0e66001f97683aa9a40c667c93"),
    ("pyyaml-6.0.4-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl",
     "71bb5b87465d88d1dfc577115af6d435bff9b26f2512936f610c26aa55966028"),
    ("tabulate-0.10.0-py3-none-any.whl", "f0b0622e567335c8fabaaa659f1b33bcb6ddfe2e496071b743aa113f8774f2d3"),
)
PLATFORMS = ("manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64")
MARKER = ".edgeship-root.json"
ROOT_ENV = "EDGESHIP_ARM_ROOT"  # a finished root folder to use instead of the cached one
TOOLS = {"mmdebstrap": "mmdebstrap", "qemu-aarch64": "qemu-user"}  # program -> Debian package
SETUP = "make setup-arm (or: edgeship devices setup arm64-emulated)"
AUXV = ("import ctypes; c = ctypes.CDLL(None); c.getauxval.restype = ctypes.c_ulong; "
        "print(c.getauxval(16), c.getauxval(26))")
MIDR = "0x00000000000f0510"  # qemu's own CPU (implementer 0x00, part 0x051), as qemu 10 reports -cpu max


class RootError(EdgeshipError):
    """The aarch64 root cannot be made here (a tool missing, a download or a check failed)."""


def pins_hash() -> str:
    """The hash of everything that goes into the folder: a change makes a new folder."""
    pins = {"debian": DEBIAN, "packages": DEBIAN_PACKAGES, "wheels": WHEELS, "midr": MIDR}
    return hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16]


def default_root() -> Path:
    """``$EDGESHIP_ARM_ROOT``, else ``~/.cache/edgeship/arm64-root-<pins>`` (shared by every clone)."""
    return Path(os.environ[ROOT_ENV]) if os.environ.get(ROOT_ENV) else user_cache() / f"arm64-root-{pins_hash()}"


def root_problem(root: Path) -> str | None:
    """Why ``root`` cannot run the runner (not made, unfinished, made for other pins, open to other
    users), or None."""
    marker = root / MARKER
    if not marker.is_file():
        return f"the aarch64 root {root} is not set up here: run {SETUP} (about 1 minute, 0.9 GB)"
    untrusted = folder_problem(root.resolve())
    if untrusted:
        return f"the aarch64 root {root} {untrusted}: its Python and runtimes run as you, so it must be yours alone"
    try:
        made = json.loads(marker.read_text())
    except ValueError:
        return f"{marker} is unreadable: run {SETUP} again"
    if root.name.startswith("arm64-root-") and made.get("pins") != pins_hash():
        return f"the aarch64 root {root} was made for other pins: run {SETUP} again"
    return None


def replace_problem(root: Path) -> str | None:
    """Why setup may not put a new root at ``root``: it is (or holds) the working folder, or it is not
    an empty folder or a root edgeship made, owned by this user; None when nothing is there."""
    here = Path.cwd()
    if root.resolve() == here or root.resolve() in here.parents:
        return "is the working folder or holds it"
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a folder"
    if st.st_uid != os.geteuid():
        return f"is owned by {owner_name(st.st_uid)}"
    if ((root / MARKER).is_file() and not (root / MARKER).is_symlink()) or not any(root.iterdir()):
        return None
    return f"holds files edgeship did not make (it has no {MARKER})"


def setup(root: Path | None = None, say: Callable[[str], None] = print, qemu: str = "qemu-aarch64") -> Path:
    """Make the root folder (nothing when a finished one is there); its path. A folder at its place
    that edgeship did not make is refused before any work (OutputError, exit 2), and kept."""
    root = Path(root or default_root()).absolute()
    if root_problem(root) is None:
        say(f"aarch64 root: {root} (already set up)")
        return root
    _check_replaceable(root)
    missing = [f"{tool} (Debian: apt-get install {package})" for tool, package in TOOLS.items()
               if shutil.which(qemu if tool == "qemu-aarch64" else tool) is None]
    if missing:
        raise RootError("cannot make the aarch64 root: missing " + ", ".join(missing))
    if root.parent == user_cache():
        private_folder(root.parent, "edgeship's folder in your cache ($XDG_CACHE_HOME/edgeship)")
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=root.name + ".part-", dir=root.parent))
    try:
        start = time.perf_counter()
        say(f"aarch64 root: Debian {DEBIAN[0]} arm64 python3.11 into {work} (mmdebstrap)")
        _debian(work)
        say(f"aarch64 root: {len(WHEELS)} pinned aarch64 wheels (torch 2.10.0, executorch 1.1.0, onnxruntime 1.32.0; "
            "about 230 MB to download, checked by sha256)")
        _wheels(work)
        _cpu_files(work, qemu)
        (work / MARKER).write_text(json.dumps({"pins": pins_hash(), "wheels": [w for w, _ in WHEELS],
                                               "debian": list(DEBIAN_PACKAGES), "made": time.time()}))
        _put_in_place(work, root)
        say(f"aarch64 root: {root} ready ({time.perf_counter() - start:.0f} s, {_size_mb(root):.0f} MB)")
        return root
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_replaceable(root: Path) -> None:
    problem = replace_problem(root)
    if problem:
        raise OutputError(f"the aarch64 root folder {root} {problem}: edgeship replaces only an empty folder or a "
                          f"root it made (one with {MARKER}) and deletes nothing else; point {ROOT_ENV} or the "
                          "device's `root =` in devices.toml at a new or empty folder")


def _put_in_place(work: Path, root: Path) -> None:
    """Move the finished ``work`` folder to ``root``. What is there (checked again: the setup took a
    minute) is moved aside first and removed only once the new root is in place."""
    _check_replaceable(root)
    if not root.exists():
        work.rename(root)
        return
    aside = Path(tempfile.mkdtemp(prefix=root.name + ".old-", dir=root.parent))
    root.rename(aside / root.name)
    try:
        work.rename(root)
    except OSError:
        (aside / root.name).rename(root)
        aside.rmdir()
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _run(command: list[str], what: str, **kwargs) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise RootError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}")


def _debian(root: Path) -> None:
    suite, mirror, security = DEBIAN
    _run(["mmdebstrap", "--quiet", "--variant=extract", "--architectures=arm64",
          "--include=" + ",".join(DEBIAN_PACKAGES), suite, str(root), mirror, f"deb {security}"], "mmdebstrap")
    (root / "usr/bin/python3").unlink(missing_ok=True)
    (root / "usr/bin/python3").symlink_to("python3.11")
    for folder in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info"):
        shutil.rmtree(root / folder, ignore_errors=True)


def _wheels(root: Path) -> None:
    import sys

    with tempfile.TemporaryDirectory(prefix="edgeship-arm-wheels-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text("".join(f"{_requirement(wheel)} --hash=sha256:{sha}\n" for wheel, sha in WHEELS))
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        env = {**os.environ, "PIP_CONSTRAINT": ""}  # a host-wide constraints file pins the host's torch
        # -I and a clean working folder: pip imports nothing from where edgeship was started (a pip.py there)
        _run([sys.executable, "-I", "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes",
              "--target", str(root / SITE), *platforms, "--only-binary=:all:", "--python-version", "3.11",
              "--implementation", "cp", "--abi", "cp311", "-r", str(requirements)], "pip install (aarch64 wheels)",
             env=env, cwd=tmp)
    shutil.rmtree(root / SITE / "torch" / "include", ignore_errors=True)  # C++ headers: 64 MB, for extensions
    shutil.rmtree(root / SITE / "bin", ignore_errors=True)


def _requirement(wheel: str) -> str:
    """``torch==2.10.0`` from its wheel file name."""
    name, version = wheel.split("-")[:2]
    return f"{name.replace('_', '-')}=={version}"


def _cpu_files(root: Path, qemu: str) -> None:
    """/proc/cpuinfo and midr_el1 as an aarch64 kernel shows the emulated CPU, one per host core."""
    proc = subprocess.run([qemu, "-L", str(root), "-cpu", "max", str(root / PYTHON), "-I", "-S", "-c", AUXV],
                          capture_output=True, text=True, timeout=300)
    try:
        hwcap, hwcap2 = (int(v) for v in proc.stdout.split())
    except ValueError:
        raise RootError(f"python3.11 under {qemu} did not run: {proc.stderr.strip()[-400:]}") from None
    write_cpu_files(root, hwcap_names(hwcap, hwcap2), os.cpu_count() or 1)


def write_cpu_files(root: Path, names: list[str], cores: int) -> None:
    (root / "proc").mkdir(exist_ok=True)
    implementer, part = "0x00", "0x051"
    blocks = [f"processor\t: {i}\nBogoMIPS\t: 2000.00\nFeatures\t: {' '.join(names)}\nCPU implementer\t: "
              f"{implementer}\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: {part}\nCPU revision\t: 0\n"
              for i in range(cores)]
    (root / "proc" / "cpuinfo").write_text("\n".join(blocks) + "\n")
    for i in range(cores):
        regs = root / f"sys/devices/system/cpu/cpu{i}/regs/identification"
        regs.mkdir(parents=True, exist_ok=True)
        (regs / "midr_el1").write_text(MIDR + "\n")


def _size_mb(root: Path) -> float:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20
