"""Watchdogs on the stages that run code edgeship cannot see into: reading calibration data, the float
reference (evaluation data, the model's load and forward), each capture method and each variant's
lowering run under a time limit, the profile's ``[limits]`` (``profile.models.Limits``). Capture and
lowering (one call into a vendor's converter) get the limit for the whole stage; the data reads and the
float reference, whose work grows with the number of samples, get it between two signs of progress
(``stopping.progressed``: a batch read or evaluated), so a big evaluation set is never stopped while it
moves, and a forward that never returns still is, one limit after the last batch.

At the limit a watchdog thread stops the processes the stage's thread started (a compiler, a converter's
helper) and raises ``Stalled`` in the stage's thread: a signal (``WAKE``) interrupts a wait in a system
call, and its handler raises at the next Python instruction (not in this module's or contextlib's code,
where a stage that is ending is: sent again instead); another thread than the main one gets it as an
asynchronous exception. ``Stalled`` is a KeyboardInterrupt, so it leaves the stage as Ctrl-C does:
``except Exception`` in a library or the model does not catch it, every block on the way out cleans up, and
the build folder keeps the last build. ``run.build`` turns it into ``UserCodeTimeout`` (exit 2) when the
stage's thread was in user code (the model's or a data source's modules: ``UserCode``), else
``StageTimeout`` (exit 3); the message names the step, the limit and the key that raises it.

Native code that never returns to Python (a C++ loop, a deadlock) takes no signal. When the stage is still
there ``GRACE_S`` after its limit, the command (the command line only: a program calling the API keeps its
process) says so, cleans up as a failed build does, and ends itself with the same exit code
(``stopping.end_process``; a local ``edgeship matrix`` first fails that build and writes the report of
the builds it finished). If that code holds Python's interpreter lock no thread of Python runs at all:
``faulthandler``'s own C thread then ends the process (exit 1) ``STACKS_S`` later, with what stopped and
every thread's stack in the build's work folder (``.work/watchdog-stacks.txt``, made new, mode 0600,
never through a link; that file exists only while a stage runs).
"""
from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

from edgeship import stopping
from edgeship.errors import EdgeshipError, StageTimeout, UserCodeTimeout
from edgeship.profile import Limits

if TYPE_CHECKING:
    from edgeship.pipeline.plan import Plan

WAKE = signal.SIGURG   # ignored by default (a late one harms nothing); nothing else here sends it
GRACE_S = 3.0          # after a limit: the stage must be gone by then, else the command ends itself
STACKS_S = 10.0        # after GRACE_S: faulthandler ends a process whose stuck code holds the interpreter lock
RESEND_S = 0.25        # the signal again until the stage's thread takes it (not while an extension initializes)
HEARTBEAT_S = 60.0     # a "still running" line this often
MAX_S = 7 * 86_400.0   # the longest limit, however large the model


class Stalled(KeyboardInterrupt):
    """Raised in the thread of a stage that ran past its limit (``stall``; None until ``bounded`` sets it)."""

    def __init__(self, stall: Stall | None = None) -> None:
        super().__init__(stall.message() if stall else "a stage ran past its [limits] limit")
        self.stall = stall
        self.exit_code = stall.exit_code if stall else StageTimeout.exit_code


@dataclass(frozen=True)
class Limit:
    """One stage's limit: ``base_s`` from ``[limits] key``, grown with the model's parameter count
    (``params``: None until known) by ``per_million_params`` of itself per million."""

    stage: str
    key: str
    base_s: float
    per_million_params: float
    params: Callable[[], int | None]
    profile: str

    def factor(self) -> float:
        return 1.0 + self.per_million_params * (self.params() or 0) / 1e6

    def seconds(self) -> float:
        return min(self.base_s * self.factor(), MAX_S)

    def described(self) -> str:
        """``[limits] lowering_s = 300 in host.toml, x1.58 for the model's 11.7 M parameters (...)``"""
        factor = self.factor()
        grown = (f", x{factor:.2f} for the model's {(self.params() or 0) / 1e6:.1f} M parameters "
                 f"(per_million_params = {self.per_million_params:g})") if round(factor, 2) != 1.0 else ""
        return f"[limits] {self.key} = {self.base_s:g} in {self.profile}{grown}"


@dataclass(frozen=True)
class Stall:
    """A stage that ran past its limit: where its thread was, and whether that was user code."""

    limit: Limit
    seconds: float
    user_code: bool
    where: str
    progress: bool = False  # the limit was the time allowed without progress (a batch read or evaluated)

    @property
    def exit_code(self) -> int:
        return UserCodeTimeout.exit_code if self.user_code else StageTimeout.exit_code

    def message(self) -> str:
        what = (f"it was running user code (the model's or a data source's) at {self.where}, which did not return"
                if self.user_code else f"it was at {self.where}")
        late = (f"made no progress (no batch of data read or evaluated) for {self.seconds:.0f} s" if self.progress
                else f"did not finish within {self.seconds:.0f} s")
        return (f"the step '{self.limit.stage}' {late} ({self.limit.described()}): {what}; it was stopped. "
                f"Raise [limits] {self.limit.key} if it needs longer")

    def error(self, outcome: str = "", native: bool = False) -> EdgeshipError:
        """The error the build ends with: UserCodeTimeout (exit 2) or StageTimeout (exit 3); ``native``: the
        stage never came back from native code, and the process ends itself."""
        kind = UserCodeTimeout if self.user_code else StageTimeout
        ended = "; it did not come back from native code, so edgeship ended its process" if native else ""
        return kind(self.message() + ended + (f"; {outcome}" if outcome else ""))


@dataclass
class UserCode:
    """Which source files are user code: the modules (their whole package, installed or not) the model's
    entry and the data sources name, and any file that is neither edgeship's nor an installed library's
    (site-packages, the standard library) nor generated (``<frozen ...>``, ``<string>``, torch.fx's code)."""

    entries: list[str] = field(default_factory=list)   # module:callable of the model and the data sources

    def locate(self, frame: FrameType | None) -> tuple[bool, str]:
        """Whether ``frame`` (a thread's innermost) runs user code: the innermost frame that is not a library's
        decides, user code or edgeship's; and where (file:line, in function) that frame, or the innermost, is."""
        named, libraries, own = self._roots(), _library_roots(), _package_root()
        innermost, called = _first_file(frame), None  # called: the library's function edgeship called
        while frame is not None:
            path, written = os.path.realpath(frame.f_code.co_filename), os.path.isabs(frame.f_code.co_filename)
            if _under(path, own):
                break
            if any(_under(path, r) for r in named) or (written and not any(_under(path, r) for r in libraries)):
                return True, _at(frame)
            called = frame if written else called
            frame = frame.f_back
        if innermost is None:
            return False, "native code"
        return False, _at(innermost) + (f", called from {_at(called)}" if called not in (None, innermost) else "")

    def _roots(self) -> list[str]:
        roots = []
        for entry in self.entries:
            module = sys.modules.get(entry.split(":")[0].split(".")[0])
            path = getattr(module, "__file__", None)
            if path:
                roots.append(os.path.realpath(os.path.dirname(path) if path.endswith("__init__.py") else path))
        return roots


def _first_file(frame: FrameType | None) -> FrameType | None:
    """The innermost frame of code read from a file (not the import system's frozen code), else ``frame``."""
    found = frame
    while found is not None and not os.path.isabs(found.f_code.co_filename):
        found = found.f_back
    return found or frame


def _library_roots() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths})


def _package_root() -> str:
    return os.path.realpath(Path(__file__).resolve().parents[1])


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _at(frame: FrameType) -> str:
    """``tinynet.py:57 (forward)``; edgeship's and a library's file from its package on (``torch/export/...py``)."""
    name = frame.f_code.co_filename.replace("\\", "/")
    own = os.path.dirname(_package_root()).replace("\\", "/") + "/"
    short = (name.split("site-packages/")[-1] if "site-packages/" in name else
             name.removeprefix(own) if name.startswith(own + "edgeship/") else os.path.basename(name))
    return f"{short}:{frame.f_lineno} ({frame.f_code.co_name})"


class Watchdog:
    """The build's stage limits: ``with watchdog.bounded(stage, key):`` runs a stage under ``[limits] key``
    of ``limits`` (read from ``profile``). ``params``: the model's parameter count once known (the limits
    grow with it); ``say``: progress lines ("still running"); ``abandon``: cleans up as a failed build does
    and says what the build folder holds, for the command's last resort (``GRACE_S``); ``stacks``: the file
    the last resort for stuck code holding the interpreter lock writes every thread's stack to."""

    def __init__(self, limits: Limits, profile: str, code: UserCode, params: Callable[[], int | None] = lambda: None,
                 say: Callable[[str], None] = print, abandon: Callable[[], str] | None = None,
                 stacks: Path | None = None) -> None:
        self.limits, self.profile, self.code, self.params = limits, profile, code, params
        self.say, self.abandon, self.stacks = say, abandon, stacks

    @contextlib.contextmanager
    def bounded(self, stage: str, key: str, progress: bool = False) -> Iterator[None]:
        """Run the block under the limit ``[limits] key``; Stalled (naming ``stage``) when it runs past it.
        ``progress``: the limit is the time allowed without progress (``stopping.progressed``), not for the
        whole block."""
        watch = _Watch(Limit(stage, key, getattr(self.limits, key), self.limits.per_million_params, self.params,
                             self.profile), self, progress)
        with _wakeable(watch):
            try:
                watch.start()
                try:
                    yield
                except Stalled as e:
                    if watch.stall is None or e.stall is watch.stall:
                        raise
                    raise Stalled(watch.stall) from None  # an asynchronous one carries no stall
            finally:
                watch.finish()  # again in _wakeable's finally: an exception may cut this one short
            if watch.stall is not None:  # the stage caught Stalled and went on: it still ran past its limit
                raise Stalled(watch.stall)


class _Watch:
    """One stage under its limit: the thread that waits for it, fires, and as the last resort ends the command."""

    def __init__(self, limit: Limit, dog: Watchdog, progress: bool = False) -> None:
        self.limit, self.dog, self.progress = limit, dog, progress
        self.thread = threading.current_thread()    # the stage's
        self.native = threading.get_native_id()     # the same, as the system knows it (its child processes)
        self.began = time.monotonic()
        self.children = stopping.child_pids(self.native)  # those it started before: not the stage's to stop
        self.left = threading.Event()               # the stage is over
        self.lock = threading.Lock()                # no signal is sent once it is over
        self.stall: Stall | None = None
        self.taken = False                          # Stalled was raised in the stage's thread (or sent to it)
        self.leaving = False                        # the stage is over: no Stalled raised in it any more
        self.hard = stopping.is_installed() and self.thread is threading.main_thread()
        self.armed = 0.0                            # the deadline faulthandler was set for
        self.stacks: _StacksFile | None = None      # the file it writes to

    def start(self) -> None:
        """Arm the last resort here, in the stage's thread (stuck code holding the interpreter lock from its
        first instruction on would keep the watchdog thread from ever running), then start that thread."""
        if self.hard and self.dog.stacks is not None:
            self.stacks = _StacksFile.open(self.dog.stacks)  # None: no last resort; the rest still holds
            if self.stacks is not None:
                self.stacks.file.write(f"edgeship (pid {os.getpid()}): the step '{self.limit.stage}' ran past its "
                                       f"limit ({self.limit.described()}) in native code that held Python's "
                                       "interpreter lock, so the process was ended (exit 1). Every thread's stack "
                                       "then:\n")
                self.stacks.file.flush()
                self._arm(self.deadline())
        threading.Thread(target=self._run, name="edgeship-watchdog", daemon=True).start()

    def finish(self) -> None:
        """The stage is over: nothing is sent to its thread any more, the last resort is disarmed and its file
        removed. Idempotent: ``bounded`` calls it on its way out twice, should an exception (a signal's)
        come between the stage's end and the first call."""
        self.leaving = True
        with self.lock:
            self.left.set()
            if self.armed:
                faulthandler.cancel_dump_traceback_later()
                self.armed = 0.0
        stacks, self.stacks = self.stacks, None
        if stacks is not None:
            stacks.remove()

    def deadline(self) -> float:
        """When the stage is past its limit (``time.monotonic()``): the limit (looked at again: it may grow)
        after the stage began, or for a stage that reports progress, after its last progress."""
        since = max(self.began, stopping.last_progress(self.thread.ident or 0)) if self.progress else self.began
        return since + self.limit.seconds()

    def _run(self) -> None:
        if self._wait():
            self._fire()

    def _wait(self) -> bool:
        """Wait for the deadline (looked at again, as it moves) or the stage's end; a line every HEARTBEAT_S."""
        beat = HEARTBEAT_S
        while True:
            deadline = self.deadline()
            self._arm(deadline)
            now = time.monotonic()
            if now >= deadline:
                return True
            if self.left.wait(min(deadline, self.began + beat) - now):
                return False
            if self.began + beat <= time.monotonic() < self.deadline():  # at the deadline: the stop says it
                self.dog.say(f"  ... {self.limit.stage}: still running after {beat:.0f} s ({self._stops_at()}: "
                             f"[limits] {self.limit.key})")
                beat += HEARTBEAT_S

    def _stops_at(self) -> str:
        if self.progress:
            return f"stopped after {self.limit.seconds():.0f} s without progress"
        return f"stopped at {self.limit.seconds():.0f} s"

    def _arm(self, deadline: float) -> None:
        """faulthandler's last resort (the command line only), for stuck code that holds the interpreter lock:
        the process ends ``GRACE_S + STACKS_S`` after ``deadline``."""
        if self.stacks is None or deadline == self.armed:
            return
        with self.lock:  # never armed after ``finish`` (it would end the process later, in another stage)
            if not self.left.is_set():
                later = max(0.0, deadline - time.monotonic()) + GRACE_S + STACKS_S
                faulthandler.dump_traceback_later(later, exit=True, file=self.stacks.file)
                self.armed = deadline

    def _fire(self) -> None:
        user, where = self.dog.code.locate(sys._current_frames().get(self.thread.ident or 0))
        self.stall = Stall(self.limit, self.limit.seconds(), user, where, self.progress)
        deadline = time.monotonic() + GRACE_S
        for attempt in range(int(GRACE_S / RESEND_S) + 1):
            with self.lock:
                if self.left.is_set():
                    break
                if not self.taken:
                    self._wake()
            if not attempt:  # what the stage's thread started (a compiler it waits for) goes too
                stopping.stop_children(grace_s=1.0, spare=self.children, thread=self.native)
            if self.left.wait(max(0.0, min(RESEND_S, deadline - time.monotonic()))) or time.monotonic() >= deadline:
                break
        if self.hard and not self.left.is_set():
            self._end_process(self.stall)

    def _wake(self) -> None:
        if self.leaving:
            return
        if self.thread is threading.main_thread():
            signal.pthread_kill(self.thread.ident or 0, WAKE)
        else:  # once: raised at the thread's next Python instruction (none comes back from native code)
            self.taken = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident or 0),
                                                       ctypes.py_object(Stalled))

    def _end_process(self, stall: Stall) -> None:
        """The stage's thread is in native code no signal brings back: stop every process this one started,
        clean up as a failed build does, and end the command with the stall's error (``stopping.end_process``:
        a local matrix first writes the report of the builds it finished)."""
        outcome = ""
        with contextlib.suppress(Exception):
            stopping.stop_children(grace_s=1.0)
            outcome = self.dog.abandon() if self.dog.abandon else ""
        stopping.end_process(str(stall.error(outcome, native=True)), stall.exit_code)


@dataclass
class _StacksFile:
    """The last resort's file, in a folder opened without following a link (``folder``: its descriptor, kept
    to remove the file by), made new: never a file or a link already there."""

    folder: int
    name: str
    file: IO[str]

    @classmethod
    def open(cls, path: Path) -> _StacksFile | None:
        """The new file at ``path`` (mode 0600); None when it cannot be made (a link, a file already there)."""
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=folder)
        except OSError:
            os.close(folder)
            return None
        return cls(folder, path.name, os.fdopen(fd, "w"))

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.name, dir_fd=self.folder)
        with contextlib.suppress(OSError):
            os.close(self.folder)


_active: list[_Watch] = []                        # watches of the main thread, innermost last
_handler: dict[str, object] = {}                  # "before": WAKE's handler before the first of them
_ENDING = {os.path.realpath(__file__), os.path.realpath(contextlib.__file__)}  # where a stage that ends is


@contextlib.contextmanager
def _wakeable(watch: _Watch) -> Iterator[None]:
    """WAKE raises Stalled in the main thread while ``watch`` runs there (another thread: nothing to do);
    ``watch`` is finished on the way out, whatever came in between."""
    if watch.thread is not threading.main_thread():
        try:
            yield
        finally:
            watch.finish()
        return
    if not _active:
        _handler["before"] = signal.signal(WAKE, _on_wake)
    _active.append(watch)
    try:
        yield
    finally:
        watch.finish()
        _active.remove(watch)
        if not _active:
            before = _handler.pop("before")  # None: not set from Python
            signal.signal(WAKE, signal.SIG_DFL if before is None else before)  # type: ignore[arg-type]


def _on_wake(signum: int, frame: FrameType | None) -> None:
    fired = next((w for w in _active if w.stall is not None and not w.taken and not w.leaving), None)
    if fired is None or _ending(frame) or stopping.in_extension_init(frame):
        return  # not ours; or raised here it would cut the stage's end short, or abort: sent again
    fired.taken = True
    raise Stalled(fired.stall)


def _ending(frame: FrameType | None) -> bool:
    """Whether the main thread is in this module's or contextlib's code (a stage that is ending: an
    exception raised there would skip ``_Watch.finish``, and the last resort would stay armed)."""
    return frame is not None and os.path.realpath(frame.f_code.co_filename) in _ENDING


def for_plan(plan: Plan, say: Callable[[str], None], abandon: Callable[[], str]) -> Watchdog:
    """The watchdog of a build: the profile's ``[limits]``; user code (``UserCode``) includes the model's entry
    module and each callable data source's. ``params`` is for the build to set once the model is."""
    from edgeship.calibration.datasets import is_callable
    from edgeship.pipeline.output import WORK

    sources = [s for s in (plan.evaluation_source, plan.calibration_source, plan.sizes_source) if s and is_callable(s)]
    return Watchdog(plan.profile.limits, str(plan.profile.path or plan.profile.name),
                    UserCode([e for e in (plan.spec.entry, *sources) if e]), say=say, abandon=abandon,
                    stacks=plan.out_dir / WORK / "watchdog-stacks.txt")
