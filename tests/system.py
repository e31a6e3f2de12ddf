"""What the suite needs from the machine beyond the Python packages, and why a test did not run.

Every skip in the suite names its cause with a tag, ``[part] why`` (``reason``): a part that can be
installed (Chromium, OpenSSH, PostgreSQL, ...), or a fact of the machine nothing installs (no NVIDIA
GPU, a CPU feature). The checks below return such a reason, or None when the part is here.

``make test`` ends with one block that counts the skipped tests by part (``summary_lines``, called
from tests/conftest.py), so "952 passed" never hides a fifth of the device tests not running; ``make
test-deps`` installs the parts. With ``EDGESHIP_TEST_STRICT=1`` (``.ci/run``) a skip for a part that
CI installs, or a skip without a tag, fails the run.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    what: str
    install: str | None   # None: a fact of the machine, nothing to install


PARTS: dict[str, Part] = {
    "chromium": Part("Chromium (headless browser)", "apt-get install chromium"),
    "onnxruntime-web": Part("onnxruntime-web (web/node_modules)", "apt-get install npm, then make setup"),
    "openssh": Part("OpenSSH server and client", "apt-get install openssh-server openssh-client"),
    "postgresql": Part("a PostgreSQL server", "apt-get install postgresql"),
    "qemu": Part("qemu-user (the emulated CPUs)", "apt-get install qemu-user"),
    "arm64-root": Part("the emulated Arm device's aarch64 root", "apt-get install mmdebstrap qemu-user; "
                                                                  "make setup-arm"),
    "toolchain": Part("a C++ toolchain (g++, cmake)", "apt-get install g++ cmake"),
    "java": Part("a Java compiler (javac, java)", "apt-get install default-jdk-headless"),
    "python": Part("a Python package of make setup's extras", "make setup"),
    "gpu": Part("an NVIDIA GPU with TensorRT", None),
    "cpu": Part("a CPU feature this machine lacks", None),
    "load": Part("a free CPU (other processes kept every core busy)", None),
    "os": Part("something the operating system here does not offer", None),
    "checkout": Part("a file beside the checkout", None),
}
UNTAGGED = "untagged"
STRICT_ENV = "EDGESHIP_TEST_STRICT"
TAG = re.compile(r"\[([a-z0-9-]+)\] ")


def reason(part: str, why: str) -> str:
    """A skip reason tagged with the part it lacks (a key of PARTS)."""
    if part not in PARTS:
        raise KeyError(f"unknown system part {part!r}; known: {', '.join(PARTS)}")
    return f"[{part}] {why}"


def chromium() -> str | None:
    from edgeship.devices.browser import find_chromium

    if find_chromium(None) is None:
        return reason("chromium", "Chromium is not installed (apt-get install chromium; .ci/run installs it)")
    if importlib.util.find_spec("playwright") is None:
        return reason("python", "playwright is not installed (make setup)")
    return None


def onnxruntime_web() -> str | None:
    from edgeship.webfiles import ort_web_problem

    problem = ort_web_problem()
    return reason("onnxruntime-web", problem) if problem else None


def browser() -> str | None:
    """Chromium, playwright and onnxruntime-web: what the browser device needs."""
    return chromium() or onnxruntime_web()


def openssh() -> str | None:
    from tests.devices import sshd

    problem = sshd.missing()
    return reason("openssh", problem) if problem else None


def ssh_keygen() -> str | None:
    return None if shutil.which("ssh-keygen") else reason("openssh", "ssh-keygen (OpenSSH) is not installed")


def toolchain() -> str | None:
    for tool, package in (("cmake", "cmake"), (os.environ.get("CXX") or "g++", "g++")):
        if shutil.which(tool) is None:
            return reason("toolchain", f"{tool} is not installed (apt-get install {package}): C++ cannot be compiled")
    return None


def java() -> str | None:
    if shutil.which("javac") is None or shutil.which("java") is None:
        return reason("java", "no javac/java on PATH: the Java decoder cannot be compiled and compared here")
    return None


def qemu(arch: str = "x86_64") -> str | None:
    if shutil.which(f"qemu-{arch}") is None:
        return reason("qemu", f"qemu-{arch} is not installed here (Debian: apt-get install qemu-user)")
    return None


def python_package(module: str, hint: str = "make setup") -> str | None:
    if importlib.util.find_spec(module) is None:
        return reason("python", f"{module} is not installed ({hint})")
    return None


def skip_counts(reasons: list[str]) -> Counter[str]:
    """How many skips each part caused (UNTAGGED for a reason without a known tag)."""
    counts: Counter[str] = Counter()
    for text in reasons:
        found = TAG.search(text)
        counts[found.group(1) if found and found.group(1) in PARTS else UNTAGGED] += 1
    return counts


def ci_failures(counts: Counter[str]) -> dict[str, int]:
    """The skips CI should have prevented: parts it installs, and skips that name no part."""
    return {part: n for part, n in counts.items() if part == UNTAGGED or PARTS[part].install is not None}


def summary_lines(reasons: list[str], examples: dict[str, str], some_left_out: bool = False) -> list[str]:
    """The closing block of ``make test``: the skipped tests by part, what installs each part
    (``some_left_out``: the run deselected tests, so "every test" would claim too much)."""
    counts = skip_counts(reasons)
    installable = {p: n for p, n in counts.items() if p != UNTAGGED and PARTS[p].install}
    lines: list[str] = []
    if installable:
        total = sum(installable.values())
        lines.append(f"{total} test(s) not run: parts of this machine are missing "
                     "(`make test-deps` installs them all):")
        lines += [f"  no {PARTS[p].what}: {n} test(s); {PARTS[p].install}" for p, n in sorted(installable.items())]
    fixed = {p: n for p, n in counts.items() if p != UNTAGGED and not PARTS[p].install}
    if fixed:
        lines.append(f"{sum(fixed.values())} test(s) not run for what this machine is (nothing to install):")
        lines += [f"  {PARTS[p].what}: {n} test(s), e.g. {examples.get(p, '')}" for p, n in sorted(fixed.items())]
    if counts.get(UNTAGGED):
        lines.append(f"{counts[UNTAGGED]} test(s) skipped without a [part] tag (tests/system.py), e.g. "
                     f"{examples.get(UNTAGGED, '')}")
    if not lines:
        lines.append(f"every {'other ' if some_left_out else ''}test ran: nothing was skipped")
    return lines


def example_reasons(reasons: list[str]) -> dict[str, str]:
    """One reason per part, without its tag, to show beside the count."""
    found: dict[str, str] = {}
    for text in reasons:
        tag = TAG.search(text)
        part = tag.group(1) if tag and tag.group(1) in PARTS else UNTAGGED
        found.setdefault(part, TAG.sub("", text, count=1).removeprefix("Skipped: ").strip())
    return found


def strict() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")

