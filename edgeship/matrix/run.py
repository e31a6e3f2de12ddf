"""``edgeship matrix``: every (model, target) of a matrix file built and measured, one after another
here, or as Ray tasks across a cluster; each build's folder lands under ``--out`` as ``edgeship
build`` writes it (``<out>/<target>/<model>/``), then the matrix report.

On Ray (``--ray auto``: ``$RAY_ADDRESS``, or a local cluster started for the run, listening on
127.0.0.1 only and with token authentication; ``--ray ADDRESS`` joins one) each build is a task
asking for ``num_cpus``; it builds into a temporary folder on whichever node runs it, with the
matrix's devices: ``host`` is that node itself, every other device a ``RayDevice`` measured on the
node that advertises ``device:<name>``. The build folder comes back to the driver as a tar through
Ray's object store (no shared filesystem) and replaces the previous one under ``--out`` (only a
folder edgeship wrote). Each build records its rows in the results store (``--db``: PostgreSQL for a
cluster; SQLite, the default, only on one machine). A build task whose worker or node died is run
again by Ray, at most ``retries`` times; a build that fails is reported with its reason and the
others' results are kept.
"""
from __future__ import annotations

import io
import os
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeship import stopping
from edgeship.errors import BadInputError, GateFailure, first_line, listing
from edgeship.fsutil import atomic_output, working_folder
from edgeship.matrix.outcome import CellResult
from edgeship.matrix.spec import Cell, Matrix, MatrixError
from edgeship.store import DEFAULT_PATH, ENV

if TYPE_CHECKING:
    import ray

    from edgeship.devices import Device

POLL_S = 1.0  # how often the driver looks at the tasks' progress
LOCAL_ENGINE = "local, one build after another"


def default_db() -> str:
    """The store every build of the run records into: ``$EDGESHIP_DB``, else the SQLite file under
    this folder."""
    return os.environ.get(ENV) or f"sqlite:///{DEFAULT_PATH}"


def absolute_db(url: str) -> str:
    """``url`` with a relative SQLite file made absolute (this folder's), so that every build task records
    into the same file whatever folder it runs in (Ray's workers run in one of their own: two builds each
    made a new store there at once); other URLs as they are."""
    prefix = "sqlite:///"
    path = url[len(prefix):] if url.startswith(prefix) else ""
    if not path or path.startswith("/") or path.startswith(":memory:"):
        return url
    return prefix + str(Path(path).absolute())


def run_local(matrix: Matrix, out: Path, db: str, say: Callable[[str], None]) -> list[CellResult]:
    """Each build in turn on this machine, into ``out``."""
    return LocalRun(matrix, out, db, say).run()


@dataclass
class LocalRun:
    """A matrix built here, one build after another (``run``). Should a build's stage stick in native code,
    a watchdog ends the process (``stopping.end_process``; nothing can unwind a thread stuck there): that
    build is failed with the watchdog's message, and the report of the builds finished so far written,
    before it goes (``ended``)."""

    matrix: Matrix
    out: Path
    db: str
    say: Callable[[str], None]
    results: list[CellResult] = field(default_factory=list)
    began: float = field(default_factory=time.perf_counter)
    cell_began: float = 0.0

    def run(self) -> list[CellResult]:
        import edgeship.matrix.report  # noqa: F401  loaded now: ``ended`` may run while the main thread is stuck

        with stopping.before_ending(self.ended):
            for cell in self.matrix.cells():
                self.say(f"{cell.label} × {cell.target_name}: building")
                self.cell_began = time.perf_counter()
                self.results.append(build_cell(cell, self.out / cell.folder, self.matrix, self.db, wrap=None))
                self.say(line(self.results[-1]))
        return self.results

    def ended(self, message: str) -> int:
        """The process ends with ``message`` (a watchdog's, in the build under way): that build failed with it,
        the matrix report of the builds so far written; the exit status the run has (a build failed: 1)."""
        cells = self.matrix.cells()
        if len(self.results) < len(cells):
            cell, rest = cells[len(self.results)], cells[len(self.results) + 1:]
            not_built = (f"; the matrix ended with it (the process could not go on), so {len(rest)} build(s) were "
                         f"not run: {listing(f'{c.label} × {c.target_name}' for c in rest)}") if rest else ""
            self.results.append(CellResult(cell.label, cell.target_name, cell.folder, "failed",
                                           round(time.perf_counter() - self.cell_began, 2), message + not_built,
                                           socket.gethostname()))
            self.say(line(self.results[-1]))
        from edgeship.matrix.report import write_matrix_report

        report = write_matrix_report(self.matrix, self.out, self.results, LOCAL_ENGINE,
                                     time.perf_counter() - self.began)
        self.say(f"wrote {report} ({len(self.results)} of {len(cells)} builds; the matrix was ended by the watchdog)")
        return exit_status(self.results)


def exit_status(results: list[CellResult]) -> int:
    """A matrix run's exit status, as ``edgeship matrix`` exits: 0 when every build passed, 3 when one failed
    its gates, else 1 when one failed."""
    failed = [r for r in results if r.state != "done"]
    return max((GateFailure.exit_code if r.state == "gates failed" else 1 for r in failed), default=0)


def build_cell(cell: Cell, dest: Path, matrix: Matrix, db: str, wrap: Callable[[Device], Device] | None) -> CellResult:
    """One build into ``dest`` with the matrix's devices (each wrapped by ``wrap`` when given)."""
    from edgeship.pipeline.plan import BuildRequest
    from edgeship.pipeline.run import build

    began = time.perf_counter()
    request = BuildRequest(target=cell.target, model=cell.model, out=dest, devices_file=matrix.devices_file,
                           device_names=list(matrix.devices), quiet=True, db=db, device_wrapper=wrap,
                           matrix=matrix.run_id)
    state, error = "done", None
    try:
        build(request)
    except GateFailure as e:
        state, error = "gates failed", str(e)
    except BadInputError as e:
        state, error = "failed", str(e)
    except Exception as e:  # a bug in one build fails that build, not the matrix
        state, error = "failed", f"{type(e).__name__}: {first_line(e)}"
    seconds = time.perf_counter() - began
    return CellResult(cell.label, cell.target_name, cell.folder, state, round(seconds, 2), error, socket.gethostname(),
                      timings={"build": round(seconds, 2)})


def line(result: CellResult) -> str:
    """The progress line of a finished build."""
    where = f" on {result.node}" if result.node else ""
    tail = f": {result.error.splitlines()[0][:200]}" if result.error else ""
    return f"{result.model} × {result.target}: {result.state} in {result.seconds:.1f} s{where}{tail}"


# ---- Ray -------------------------------------------------------------------------------------

@contextmanager
def ray_session(address: str, matrix: Matrix) -> Iterator[str]:
    """Join the cluster at ``address`` ("auto": ``$RAY_ADDRESS`` when set, else a local cluster
    started here for the block, owning every device of the matrix: loopback only, token
    authentication, see ``localray``); yields what was joined, for the messages."""
    import ray

    if ray.is_initialized():
        yield "the running Ray session"
    elif address == "auto" and not os.environ.get("RAY_ADDRESS"):
        from edgeship.matrix.localray import LOOPBACK, local_cluster
        from edgeship.matrix.raydevice import resource_of

        with local_cluster({resource_of(d): 1 for d in matrix.devices if d != "host"}):
            yield f"a local Ray cluster started for this run (on {LOOPBACK} only, token authentication)"
    else:
        with tempfile.TemporaryDirectory(prefix="edgeship-ray-cwd-") as empty:
            try:
                with working_folder(empty):  # ray.init puts it on every worker's sys.path
                    ray.init(address=None if address == "auto" else address, logging_level="ERROR",
                             log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise MatrixError(f"--ray {address}: cannot join the Ray cluster: {first_line(e)}") from None
            yield f"the Ray cluster at {address if address != 'auto' else os.environ['RAY_ADDRESS']}"


def run_ray(matrix: Matrix, out: Path, db: str, say: Callable[[str], None]) -> list[CellResult]:
    """Each build as a Ray task; folders back through the object store into ``out``."""
    import ray

    task = ray.remote(ray_build).options(num_cpus=matrix.num_cpus, max_retries=matrix.retries,
                                         retry_exceptions=False)
    # The progress board lives on the driver's own node, so no other node's death takes it along.
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    board = ray.remote(num_cpus=0)(Board).options(scheduling_strategy=here).remote()
    pending: dict[ray.ObjectRef[tuple[CellResult, bytes | None]], tuple[Cell, float]] = {}
    for cell in matrix.cells():
        refuse_foreign(out / cell.folder)
    for cell in matrix.cells():
        pending[task.remote(cell, matrix, db, board)] = (cell, time.perf_counter())
        say(f"{cell.label} × {cell.target_name}: queued")
    results, shown = [], {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
        for key, state in board_states(board).items():  # building / measuring, as the tasks say
            if shown.get(key) != state:
                shown[key] = state
                say(f"{key}: {state}")
        if not ready:
            continue
        ref = ready[0]
        cell, queued = pending.pop(ref)
        try:
            result, archive = ray.get(ref)
        except ray.exceptions.RayError as e:  # the task's node died more often than retries allow
            result, archive = CellResult(cell.label, cell.target_name, cell.folder, "failed",
                                         round(time.perf_counter() - queued, 2),
                                         f"Ray lost the build: {type(e).__name__}: {first_line(e)}"), None
        if archive is not None:
            began = time.perf_counter()
            land(archive, out / cell.folder)
            result.timings["unpack"] = round(time.perf_counter() - began, 3)
            result.timings["bytes"] = len(archive)
        result.timings["queued_to_done"] = round(time.perf_counter() - queued, 2)
        results.append(result)
        say(line(result))
    order = {(c.label, c.target_name): i for i, c in enumerate(matrix.cells())}
    return sorted(results, key=lambda r: order[(r.model, r.target)])


def board_states(board: Any) -> dict[str, str]:   # a Board actor's handle
    """What the build tasks last told the board; nothing when it cannot be read (the progress lines
    are not worth failing the run for)."""
    import ray

    try:
        return ray.get(board.states.remote(), timeout=10)
    except (ray.exceptions.RayError, TimeoutError):
        return {}


class Board:
    """A Ray actor the build tasks tell what they are doing (building on a node, measuring on a
    device), read by the driver for its progress lines."""

    def __init__(self) -> None:
        self._states: dict[str, str] = {}

    def set(self, key: str, state: str) -> None:
        self._states[key] = state

    def states(self) -> dict[str, str]:
        return dict(self._states)


def ray_build(cell: Cell, matrix: Matrix, db: str, board: Any = None) -> tuple[CellResult, bytes | None]:
    """The Ray task: the build in a temporary folder on this node, returned as a tar."""
    import ray

    from edgeship.matrix.raydevice import RayDevice

    node = f"{socket.gethostname()} (Ray node {ray.get_runtime_context().get_node_id()[:12]})"
    key = f"{cell.label} × {cell.target_name}"
    tell = (lambda state: board.set.remote(key, state)) if board is not None else (lambda state: None)
    tell(f"building on {node}")

    def wrap(device: Device) -> Device:
        if device.local_to_node:  # this node's own CPU, browser or emulator
            return device
        return RayDevice(device, matrix.devices_file, matrix.retries,
                         on_start=lambda name: tell(f"measuring on {name}"))

    with tempfile.TemporaryDirectory(prefix="edgeship-matrix-") as work:
        dest = Path(work) / "build"
        result = build_cell(cell, dest, matrix, db, wrap)
        result.node = node
        archive = pack_folder(dest) if dest.is_dir() else None
    return result, archive


def pack_folder(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(folder), arcname=".")
    return buffer.getvalue()


def refuse_foreign(dest: Path) -> None:
    """MatrixError when replacing ``dest`` by a new build folder would lose a file edgeship did not
    write there: ``dest`` must be absent, or a folder whose every file is edgeship's (the build
    manifest's, or edgeship's own bookkeeping; the same test ``edgeship build`` makes, BuildFolder)."""
    from edgeship.pipeline.output import STATE, BuildFolder

    if not (dest.exists() or dest.is_symlink()):
        return
    if dest.is_symlink() or not dest.is_dir():
        raise MatrixError(f"{dest}: exists and is not a folder edgeship wrote; the matrix would replace it: choose "
                          "another --out or move it")
    folder = BuildFolder(dest)
    known, _ = folder.known()
    strangers = [rel for rel in folder.files_under(".") if rel.split("/")[0] not in STATE and rel not in known]
    if strangers:
        raise MatrixError(f"{dest}: holds {listing(strangers)}, which edgeship did not write; the matrix would replace "
                          "the folder: choose another --out or move them")


def land(archive: bytes, dest: Path) -> None:
    """The build folder from ``archive`` at ``dest``, written beside it and swapped in by
    ``atomic_output``, after checking again that ``dest`` holds nothing but edgeship's files."""
    refuse_foreign(dest)
    with atomic_output(dest) as fresh:
        fresh.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(fresh, filter="data")


# ---- the run ---------------------------------------------------------------------------------

@dataclass
class MatrixRun:
    """A finished matrix run: each build's outcome, and where the report went."""

    results: list[CellResult]
    report: Path
    engine: str
    seconds: float

    @property
    def failed(self) -> list[CellResult]:
        return [r for r in self.results if r.state != "done"]


def run_matrix(matrix: Matrix, out: Path, ray: str | None = None, db: str | None = None,
               say: Callable[[str], None] = print) -> MatrixRun:
    """Every build of ``matrix`` into ``out``: locally, or on Ray (``ray``: "auto" or an address);
    then the matrix report (matrix.md, matrix.json) in ``out``."""
    from edgeship.matrix.report import write_matrix_report
    from edgeship.store import ResultsStore

    out = Path(out)
    db = absolute_db(db or default_db())
    ResultsStore(db)  # a bad URL or an unreachable server fails before the first build (StoreError)
    began = time.perf_counter()
    if ray is None:
        engine = LOCAL_ENGINE
        results = run_local(matrix, out, db, say)
    else:
        with ray_session(ray, matrix) as engine:
            say(f"matrix on {engine}")
            results = run_ray(matrix, out, db, say)
    seconds = time.perf_counter() - began
    report = write_matrix_report(matrix, out, results, engine, seconds)
    return MatrixRun(results, report, engine, round(seconds, 2))

