"""Stopping a command at Ctrl-C (SIGINT), SIGTERM or SIGHUP (its terminal or ssh session closed), at
any stage, within about a second.

The command line installs the handler (``installed``) for the length of one command. On the first
signal it sets ``STOP``, asks every device that is running a job to stop it there (``running_on``;
an ssh device kills its remote runner), stops every process this one started, and their children
(SIGTERM, then SIGKILL after ``GRACE_S``: runners, ssh clients, the emulator, the browser), then
raises ``Interrupted`` in the main thread. Threads that measure check ``STOP`` before each job and
after it (``check``), so a runner stopped by the signal is never recorded as a result, and the build
does not go on to the next one. A block that must not be cut in half (publishing the build into
its folder: a few renames) runs ``deferred``: the signal is kept and raised when it ends. A signal
that comes while a C extension module initializes (during an import) is raised once that is done
(tried again every ``AGAIN_S``, for at most ``IMPORT_GRACE_S``): raised in the Python code such an
initialization calls, it would cross C and abort the process.

``Interrupted`` is a KeyboardInterrupt, so code that passes Ctrl-C through passes it through too;
the command exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).

The handlers are this process's only: a process a library forks from it (multiprocessing's "fork":
a runtime's usage telemetry sends each event from one) starts with the handlers from before
(``_restore``). A Python handler runs only between bytecodes, so a forked child stuck in C
(telemetry's child, forked while another thread held libc's resolver lock, waits for that lock
forever) would never act on the SIGTERM its parent's multiprocessing sends it at exit, and the
command would wait for it at exit forever: an `edgeship build` hung so after its last line.

For the stage watchdog (``pipeline/watchdog.py``): ``progressed`` (a stage's thread says it read or
evaluated a batch), the processes one thread started (``child_pids``, ``stop_children``), and the
last resort that ends the command (``end_process``), with what a command that runs several builds
does first (``before_ending``: a local matrix writes the report of the builds it finished).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, Protocol

if TYPE_CHECKING:
    import psutil

STOP = threading.Event()
GRACE_S = 1.0
AGAIN_S, IMPORT_GRACE_S = 0.05, 10.0   # a signal in an extension's initialization: again every 50 ms, at most 10 s
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal or ssh session closed
_running: dict[int, Cancellable] = {}   # id -> a device running a job now
_state = {"deferred": 0, "pending": 0, "since": 0.0, "owed": 0}  # blocks that defer it, the signal kept,
# when it came, and a signal that came in an extension's initialization and is still to be raised
_again: list[threading.Timer] = []   # the timers sending that signal again
_before: dict[int, object] = {}   # while installed: the handlers it replaced
_progress: dict[int, float] = {}   # thread ident -> when the stage running in it last made progress
_last_words: list[Callable[[str], int]] = []   # before_ending's actions, innermost last


class Cancellable(Protocol):
    """A device running a job, which a signal stops there."""

    def cancel(self) -> None: ...


class Interrupted(KeyboardInterrupt):
    """The command was stopped by a signal; ``exit_code`` is 128 + its number."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum
        self.outcome = ""  # what the build folder holds now, said by the build that was stopped


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop the command (see the module's description) until the block ends;
    the handlers before it come back after. Only the main thread can install them: elsewhere this
    does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    STOP.clear()
    _state.update(deferred=0, pending=0, since=0.0, owed=0)
    _before.update({s: signal.signal(s, _on_signal) for s in SIGNALS})
    try:
        yield
    finally:
        _restore()
    if _state["owed"]:   # the block ended before the signal came again: raised here, not lost
        raise Interrupted(_state["owed"])


def _restore() -> None:
    """The handlers from before ``installed``: when its block ends, and in a process forked while it
    runs (see the module's description)."""
    for s, handler in _before.items():
        signal.signal(s, handler)
    _before.clear()
    for timer in _again:   # no signal sent again to the handlers from before
        timer.cancel()
    _again.clear()


os.register_at_fork(after_in_child=_restore)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    first = not STOP.is_set()
    STOP.set()
    if first:
        stop_children()
        _state["since"] = time.monotonic()
    if _state["deferred"]:
        _state["pending"] = _state["pending"] or signum
        return
    if in_extension_init(frame) and time.monotonic() - _state["since"] < IMPORT_GRACE_S:
        # Raised in Python code a C extension's initialization calls (one creating its enums),
        # the exception crosses C and aborts the process (SIGABRT: no exit status, the folder's lock
        # left): the signal comes again once that is done.
        _state["owed"] = signum
        _again.append(threading.Timer(AGAIN_S, os.kill, (os.getpid(), signum)))
        _again[-1].start()
        return
    _state["owed"] = 0
    raise Interrupted(signum)


def is_installed() -> bool:
    """Whether a command's handlers are installed (``installed``): the process is edgeship's own, and may
    be ended by it (a watchdog's last resort), which a Python program calling edgeship's API is not."""
    return bool(_before)


def in_extension_init(frame: FrameType | None) -> bool:
    """Whether the main thread runs inside a C extension module's initialization (importlib's
    ExtensionFileLoader creating or executing it, somewhere down its stack)."""
    from importlib.machinery import ExtensionFileLoader

    while frame is not None:
        code = frame.f_code
        if (code.co_filename.startswith("<frozen importlib") and code.co_name in ("create_module", "exec_module")
                and isinstance(frame.f_locals.get("self"), ExtensionFileLoader)):
            return True
        frame = frame.f_back
    return False


def stop_children(grace_s: float = GRACE_S, spare: Collection[int] | None = None, thread: int | None = None) -> None:
    """Ask running devices to stop their job, then stop every process this one started (and theirs).
    With ``spare`` (``child_pids(thread)`` when a stage began), only the processes started since by the
    thread ``thread`` (its native id), and theirs: what one stage started (a watchdog stopping it), not a
    Ray cluster the command runs beside, nor what other threads started (another build's runners, when a
    program runs several builds in threads). See ``child_pids`` for where the system cannot tell threads
    apart."""
    import psutil

    for device in list(_running.values()) if spare is None else []:
        with contextlib.suppress(Exception):  # best effort: the local processes go below in any case
            device.cancel()
    try:
        children = _started(psutil.Process(), spare, thread)
    except psutil.Error:
        return
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    for child in _still_running(children, grace_s):
        with contextlib.suppress(psutil.Error):
            child.kill()


def child_pids(thread: int | None = None) -> set[int]:
    """The processes this one has started and that still run (not theirs). With ``thread`` (a native
    thread id, ``threading.get_native_id()``): those that thread started, from Linux's
    ``/proc/self/task/<tid>/children``; where the system keeps no such list (macOS, a kernel built without
    CONFIG_PROC_CHILDREN) every one this process started. A process started by another thread (a
    library's worker thread) is that thread's; one whose thread has ended belongs to another thread."""
    import psutil

    own = _thread_children(thread) if thread is not None else None
    if own is not None:
        return own
    try:
        return {p.pid for p in psutil.Process().children()}
    except psutil.Error:
        return set()


def _thread_children(thread: int) -> set[int] | None:
    """The processes the thread ``thread`` (native id) of this process started; None where unknown."""
    try:
        return {int(pid) for pid in Path(f"/proc/self/task/{thread}/children").read_text().split()}
    except (OSError, ValueError):
        return None


def _started(process: psutil.Process, spare: Collection[int] | None, thread: int | None = None) -> list[psutil.Process]:
    """The processes ``process`` started (but those in ``spare``, when given: then only those the thread
    ``thread`` started, where the system says), and all of theirs."""
    import psutil

    if spare is None:
        return process.children(recursive=True)
    found = []
    for pid in sorted(child_pids(thread) - set(spare)):
        with contextlib.suppress(psutil.Error):
            child = psutil.Process(pid)
            found += [child, *child.children(recursive=True)]
    return found


def _still_running(processes: list[psutil.Process], grace_s: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after up to ``grace_s``. A zombie has stopped: a
    grandchild (Chromium under playwright's driver) stays one until its own parent reaps it, which
    psutil.wait_procs would wait out to the end."""
    import psutil

    def running(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False
    deadline = time.monotonic() + grace_s
    alive = [p for p in processes if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if running(p)]
    return alive


def progressed() -> None:
    """The stage running in this thread made progress (read or evaluated a batch of data): a watchdog
    that stops a stage only when it makes none (``pipeline/watchdog.py``: the data reads and the float
    reference) counts its limit from now. Cheap: called once a batch."""
    _progress[threading.get_ident()] = time.monotonic()


def last_progress(thread: int) -> float:
    """When the stage in the thread ``thread`` (its ``threading.get_ident()``) last made progress
    (``time.monotonic()``; 0.0: never)."""
    return _progress.get(thread, 0.0)


@contextlib.contextmanager
def before_ending(last_words: Callable[[str], int]) -> Iterator[None]:
    """A command that runs several builds in this process (a local ``edgeship matrix``): should a watchdog
    end the process in the block (``end_process``), ``last_words(message)`` runs first, with the error that
    ends it, says what the command finished (the matrix report) and returns the exit status."""
    _last_words.append(last_words)
    try:
        yield
    finally:
        _last_words.remove(last_words)


def end_process(message: str, exit_code: int) -> NoReturn:
    """End the command at once (a watchdog's last resort: a stage stuck in native code that no signal
    brings back): ``message`` as its error, then ``before_ending``'s last words (whose status it exits
    with), else ``exit_code``. Only for a process that is edgeship's command (``is_installed``)."""
    with contextlib.suppress(Exception):
        print(f"edgeship: error: {message}", file=sys.stderr, flush=True)
    for last_words in reversed(list(_last_words)):
        with contextlib.suppress(Exception):
            exit_code = last_words(message)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(exit_code)


def check() -> None:
    """Raise Interrupted when the command is being stopped (in any thread)."""
    if STOP.is_set():
        raise Interrupted(_state["pending"] or signal.SIGINT)


def pause(seconds: float) -> None:
    """``time.sleep`` that ends at once, with Interrupted, when the command is being stopped."""
    STOP.wait(seconds)
    check()


@contextlib.contextmanager
def running_on(device: Cancellable) -> Iterator[None]:
    """``device`` runs a job in this block: on a signal its ``cancel()`` stops it there."""
    _running[id(device)] = device
    try:
        yield
    finally:
        _running.pop(id(device), None)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A signal during the block is kept, and raised (Interrupted) when the block ends."""
    _state["deferred"] += 1
    try:
        yield
    finally:
        _state["deferred"] -= 1
    if not _state["deferred"] and _state["pending"]:
        raise Interrupted(_state["pending"])
