"""Run the ``edgeship`` command with the ONNX backend's lowering replaced by a call that never returns, for
the watchdog tests (``test_stalled_stages.py``).

    python -m tests.faults.stall_at HOW MARKER [edgeship arguments ...]

HOW is ``waits``: the lowering is a library's converter that runs a helper process (its command line ends
with MARKER) and waits for it, forever; ``native``: it locks a mutex its own thread holds, native code that
never returns and takes no signal (the interpreter lock released, as a deadlocked C++ library holds none),
called straight from edgeship's code; or ``holds``: the same deadlock with the interpreter lock held. No
frame of this file is on the stack when one stalls: the stall is in a library's (or edgeship's) code, not
the model's. The build is otherwise the real one.
"""
from __future__ import annotations

import ctypes
import os
import sys
import sysconfig


class _Mutex(ctypes.Structure):
    _fields_ = [("opaque", ctypes.c_char * 64)]  # pthread_mutex_t (40 bytes on x86-64); zeroes: unlocked, default


class _Held:
    """ctypes' argument converter: whatever the caller passes (the LowerRequest), the mutex."""

    mutex = _Mutex()

    @classmethod
    def from_param(cls, _obj: object) -> object:
        return ctypes.byref(cls.mutex)


# A vendor's converter that runs a helper process and waits for it (the helper never ends). Its code is
# compiled as if installed (a file under site-packages), as every converter edgeship calls is.
VENDOR = """
import subprocess, sys


def lower(request):
    subprocess.run([sys.executable, "-c", "import time; time.sleep(600)", MARKER])
"""


def waits(marker: str) -> object:
    scope = {"MARKER": marker}
    exec(compile(VENDOR, os.path.join(sysconfig.get_paths()["purelib"], "vendorconvert", "lower.py"), "exec"), scope)
    return scope["lower"]


def native(_marker: str, library: type[ctypes.CDLL] = ctypes.CDLL) -> object:
    lock = library(None).pthread_mutex_lock  # CDLL: the interpreter lock is released around the call
    lock.argtypes, lock.restype = [_Held], ctypes.c_int
    lock(None)
    return lock  # a second lock by the same thread: a default mutex deadlocks, signals or not


def holds(marker: str) -> object:
    return native(marker, ctypes.PyDLL)  # PyDLL: the interpreter lock stays held: no Python thread runs


def main(argv: list[str]) -> int:
    from edgeship.backends.registry import BACKENDS

    BACKENDS["onnx"].lower = {"waits": waits, "native": native, "holds": holds}[argv[0]](argv[1])
    from edgeship.cli import main as edgeship

    return edgeship(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
