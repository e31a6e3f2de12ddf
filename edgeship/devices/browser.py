"""A browser on this machine: Chromium, driven by playwright, runs onnxruntime-web artifacts.

Each job is served from 127.0.0.1 on a free port (the runner page, the job's model and inputs, and
onnxruntime-web's files, never a CDN) with ``Cross-Origin-Opener-Policy: same-origin`` and
``Cross-Origin-Embedder-Policy: require-corp``, which make the page cross-origin isolated: without
them there is no SharedArrayBuffer and onnxruntime-web runs one thread whatever it is asked. A
fresh headless Chromium (Debian's package; edgeship never downloads a browser) loads the page,
whose ``run()`` (devices/web/runner.mjs) does what runner.py does on other devices: load, warm up,
time with ``performance.now()``, run every evaluation batch. Timings and outputs come back to the
host, which computes accuracy from them as for every other runtime.

A page error, a failed load (a missing .wasm served as a 404 page reads "expected magic word 00 61
73 6d"), an op the wasm backend lacks, or a page that does not finish by the job's timeout (the
browser is then killed) fail that job with the browser's own message.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Mapping
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np

from edgeship.backends.registry import SPECS, BackendSpec
from edgeship.devices.base import (
    WEB_RUNTIME,
    Device,
    DeviceReport,
    Job,
    JobResult,
    MeasurementError,
    RunnerError,
    checked_result,
)
from edgeship.devices.protocol import not_measured, result_document
from edgeship.devices.runner import batches, check_sha256, merge_batches
from edgeship.webfiles import ORT_FILES, ort_web_package, ort_web_version

if TYPE_CHECKING:
    from playwright.sync_api import Browser


class BrowserSettings(Protocol):
    """What a browser device reads of its [devices.NAME] table (``devices.config.BrowserConfig``)."""

    @property
    def executable(self) -> str | None: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def headless(self) -> bool: ...
    @property
    def launch_timeout_s(self) -> float: ...


class PageInput(TypedDict):
    """One input of the page's job: how runner.mjs makes a tensor of its raw bytes."""

    name: str
    dtype: str
    shape: list[int]


class PageJob(TypedDict):
    """What the page's ``open`` loads (paths relative to the served folder)."""

    artifact: str
    external_data: list[str]
    inputs: list[PageInput]
    batches: list[list[str]]   # per batch, one file of raw little-endian bytes per input
    options: Mapping[str, object]


class PageInfo(TypedDict):
    """What runner.mjs's ``open`` answers once the model is loaded."""

    loadMs: float
    outputNames: list[str]
    ortVersion: str
    threads: int
    crossOriginIsolated: bool
    hardwareConcurrency: int
    userAgent: str


class PageOutput(TypedDict):
    """One output runner.mjs sends back: base64 little-endian bytes, onnxruntime-web's dtype, dims."""

    name: str
    dtype: str
    dims: list[int]
    data: str

PAGE = Path(__file__).resolve().parent / "web"
PAGE_FILES = ("runner.html", "runner.mjs")
PAGE_UNMEASURED = ("onnxruntime-web loads with the page, before the job, and a page cannot read the resident memory "
                   "of its browser's processes")
CHROMIUM = ("/usr/bin/chromium", "chromium", "chromium-browser")
# Chromium's own network chatter is refused on a closed network; none of it is needed here.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
                     "Cross-Origin-Resource-Policy": "same-origin", "Cache-Control": "no-store"}


def missing_setup(executable: str | None = None) -> str | None:
    """Why a browser job cannot run on this machine (None: it can)."""
    if find_chromium(executable) is None:
        return f"no Chromium ({executable or CHROMIUM[0]} not found; apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return ("playwright is not installed (pip install \"edgeship[web]\"; playwright's browser download is never "
                "used)")
    package = ort_web_package()
    if package is None:
        return "onnxruntime-web is not installed (make setup runs npm ci in web/; or set EDGESHIP_ORT_WEB)"
    absent = [f for f in ORT_FILES if not (package / "dist" / f).is_file()]
    if absent:
        return f"onnxruntime-web at {package} lacks {', '.join(absent)}"
    return None


def web_backends() -> dict[str, type[BackendSpec]]:
    """The backends whose artifacts a browser device runs (their runtime is the page's, WEB_RUNTIME)."""
    return {name: spec for name, spec in SPECS.items() if spec.runtime == WEB_RUNTIME}


def find_chromium(executable: str | None = None) -> str | None:
    for candidate in ([executable] if executable else CHROMIUM):
        found = candidate if os.path.isabs(candidate) and os.access(candidate, os.X_OK) else shutil.which(candidate)
        if found:
            return found
    return None


class IsolatedHandler(SimpleHTTPRequestHandler):
    """Static files from one folder, with the cross-origin isolation headers; silent."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm",
                      **{spec.suffix: "application/octet-stream" for spec in web_backends().values()}}

    def end_headers(self) -> None:
        for key, value in ISOLATION_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


class StaticServer:
    """``folder`` served on 127.0.0.1 at a free port, in a thread, while the ``with`` block runs."""

    def __init__(self, folder: Path) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(IsolatedHandler, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __enter__(self) -> StaticServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Chromium:
    """A fresh Chromium from playwright, closed when the ``with`` block ends, or killed (``kill()``:
    a page stuck in a script keeps a graceful close waiting for minutes)."""

    def __init__(self, executable: str, headless: bool = True, timeout_s: float = 60.0) -> None:
        self.executable, self.headless, self.timeout_s = executable, headless, timeout_s

    def __enter__(self) -> Browser:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        try:
            self.browser = self._playwright.chromium.launch(
                executable_path=self.executable, headless=self.headless, args=CHROMIUM_ARGS,
                timeout=self.timeout_s * 1000)
        except Exception:
            self._playwright.stop()
            raise
        return self.browser

    def kill(self) -> None:
        """SIGKILL every Chromium process this process started (playwright's driver is our child,
        Chromium its child), so closing afterwards finds the browser gone instead of waiting."""
        for pid in _descendants(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().split(b"\0")[0]
                if b"chrom" in os.path.basename(command).lower():
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                continue

    def __exit__(self, *exc: object) -> None:
        try:
            self.browser.close()
        finally:
            self._playwright.stop()


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc; none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


class BrowserDevice(Device):
    """Chromium on this machine; one fresh browser and page per job."""

    transport = "browser"
    local_to_node = True

    def __init__(self, name: str, config: BrowserSettings) -> None:
        super().__init__(name)
        self.config = config
        self._session: PageSession | None = None  # the job's page, while it runs

    @property
    def address(self) -> str:
        return f"chromium@{socket.gethostname()}"

    @property
    def lock_key(self) -> str:
        # The same CPU as the host device: its jobs queue behind the host's, never beside them.
        return f"local-{socket.gethostname()}"

    def skip_reason(self, job: Job, host_unavailable: str | None) -> str | None:
        if job.is_reference:
            return super().skip_reason(job, host_unavailable)
        if job.runtime != WEB_RUNTIME:
            return (f"a browser device runs only {WEB_RUNTIME} artifacts (backend {', '.join(web_backends())}), "
                    f"not {job.runtime}")
        return missing_setup(self.config.executable)

    def describe(self) -> str:
        return f"{self.name} (Chromium)"

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        why = missing_setup(self.config.executable)
        if why:
            raise MeasurementError(f"not measured here: {why}")
        threads = job.threads or self.config.threads
        with PageSession(self.config, job, workdir, threads) as session:
            self._session = session
            try:
                info = session.open()
                first, timings = session.runs(job.warmup, job.iterations)
                per_batch = session.outputs()
            finally:
                self._session = None
        merged = merge_batches(per_batch, job.batch, session.samples)
        notes = []
        if threads and threads > 1 and info["threads"] != threads:
            notes.append(f"asked for {threads} wasm threads, onnxruntime-web ran {info['threads']} "
                         f"(cross-origin isolated: {info['crossOriginIsolated']})")
        doc = page_result(job, info, first, timings, session.samples, session.chromium)
        (workdir / "result.json").write_text(json.dumps(doc, indent=1))
        return JobResult(doc, merged, notes)

    def cancel(self) -> None:
        """Kill the job's Chromium at once (a graceful close would wait for the page's script)."""
        session = self._session
        if session is not None:
            session.expire()

    def check(self) -> DeviceReport:
        report = DeviceReport(self.name, self.transport, self.address, reachable=False)
        why = missing_setup(self.config.executable)
        if why:
            report.error = why
            return report
        try:
            with Chromium(find_chromium(self.config.executable), self.config.headless,
                          self.config.launch_timeout_s) as browser:
                page = browser.new_page()
                page.goto("about:blank")
                agent = page.evaluate("navigator.userAgent")
                cores = page.evaluate("navigator.hardwareConcurrency")
                report.facts.update(browser="Chromium " + browser.version, user_agent=agent, cpus=cores)
        except Exception as e:  # noqa: BLE001 (any launch failure is the report's error)
            report.error = f"Chromium did not start: {str(e).splitlines()[0]}"
            return report
        report.reachable = True
        report.runtimes[WEB_RUNTIME] = f"onnxruntime-web {ort_web_version()} (wasm)"
        return report


class PageSession:
    """One job's page in a fresh Chromium: ``open()`` loads the model and inputs, ``time()`` times
    runs of the first batch in the page, ``outputs()`` runs every batch. Every call must finish by
    the job's deadline (``job.timeout_s`` from entering), else Chromium is killed and the job fails.
    The browser's messages are kept in ``workdir``/browser.log, the URLs it asked for in
    requests.json."""

    def __init__(self, config: BrowserSettings, job: Job, workdir: Path, threads: int | None) -> None:
        self.config, self.job, self.workdir, self.threads = config, job, workdir, threads
        self.log: list[str] = []
        self.requests: list[str] = []
        self.chromium = "unknown"
        self.samples = 0
        self._hung = False  # a call timed out: Chromium is killed, not closed

    def __enter__(self) -> PageSession:
        from playwright.sync_api import Error as PlaywrightError

        self.deadline = time.monotonic() + self.job.timeout_s
        self.workdir.mkdir(parents=True, exist_ok=True)
        site = self.workdir / "site"
        shutil.rmtree(site, ignore_errors=True)
        self.page_job = self._stage(site)
        self._server = StaticServer(site).__enter__()
        self._chromium = Chromium(find_chromium(self.config.executable), self.config.headless,
                                  self.config.launch_timeout_s)
        try:
            browser = self._chromium.__enter__()
        except PlaywrightError as e:
            self._server.__exit__(None, None, None)
            raise MeasurementError(f"Chromium did not start: {str(e).splitlines()[0]}") from None
        self.chromium = browser.version
        try:
            self.page = browser.new_page()
            self.page.on("console", lambda m: self.log.append(f"console.{m.type}: {m.text}"))
            self.page.on("pageerror", lambda e: self.log.append(f"page error: {e}"))
            self.page.on("request", lambda r: self.requests.append(r.url))
            self.page.goto(self._server.url + "runner.html", wait_until="load", timeout=self._left_ms())
            self.page.wait_for_function("window.edgeshipReady === true", timeout=self._left_ms())
        except BaseException as e:
            self.__exit__(type(e), e, None)
            raise self._failure(e) from None
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._hung:
                self._chromium.kill()
            self._chromium.__exit__(*exc)
        finally:
            self._server.__exit__(*exc)
            (self.workdir / "browser.log").write_text("\n".join(self.log) + "\n")
            (self.workdir / "requests.json").write_text(json.dumps(self.requests))

    def open(self) -> PageInfo:
        """Load the artifact; what the page reports (threads, isolation, versions, load time)."""
        return self._call("open", {**self.page_job, "threads": self.threads})

    def time(self, warmup: int, iterations: int) -> list[float]:
        return self._call("time", warmup, iterations)

    def runs(self, warmup: int, iterations: int) -> tuple[float | None, list[float]]:
        """The first run after the load, timed on its own as the first of the ``warmup`` runs (with no
        warmup: the first timed run), and the ``iterations`` timed runs; (None, []) for none."""
        if not iterations:
            return None, []
        if not warmup:
            timings = self.time(0, iterations)
            return timings[0], timings
        first = self._call("first")
        return first, self.time(warmup - 1, iterations)

    def outputs(self) -> list[list[np.ndarray]]:
        return [[decode(o) for o in outputs] for outputs in self._call("outputs")]

    def _call(self, function: str, *args: object) -> Any:   # what the page answered (JSON)
        """``window.edgeship[function](...args)`` in the page, awaited until the deadline. The
        deadline is kept here, not in the page: a page busy in a loop of awaited runs never gets to
        its own timers, so a timer thread kills Chromium when the time is up."""
        from playwright.sync_api import Error as PlaywrightError

        timer = threading.Timer(self._left_ms() / 1000, self.expire)
        timer.daemon = True
        timer.start()
        try:
            self.page.evaluate(
                "([f, args]) => { window.edgeshipAnswer = undefined; window.edgeshipError = undefined;"
                " window.edgeship[f](...args).then(a => { window.edgeshipAnswer = {value: a}; },"
                " e => { window.edgeshipError = String(e && e.message || e); }); }", [function, list(args)])
            self.page.wait_for_function("window.edgeshipAnswer !== undefined || window.edgeshipError !== undefined",
                                        timeout=self._left_ms() + 5000, polling=50)
            error = self.page.evaluate("window.edgeshipError")
            answer = None if error is not None else self.page.evaluate("window.edgeshipAnswer.value")
        except PlaywrightError as e:
            raise self._failure(e) from None
        finally:
            timer.cancel()
        if error is not None:
            raise RunnerError(f"onnxruntime-web in Chromium: {error}{_last(self.log)}")
        return answer

    def expire(self) -> None:
        """Kill Chromium now: the call waiting on the page fails, and closing does not wait for it."""
        self._hung = True
        self._chromium.kill()

    def _left_ms(self) -> float:
        return max(1.0, (self.deadline - time.monotonic()) * 1000)

    def _failure(self, e: BaseException) -> MeasurementError:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        if isinstance(e, MeasurementError):
            return e
        if isinstance(e, PlaywrightTimeout) or self._hung:
            self._hung = True
            return MeasurementError(f"the page did not finish within {self.job.timeout_s:.0f} s; Chromium was "
                                    f"killed{_last(self.log)}")
        return MeasurementError(f"Chromium: {str(e).splitlines()[0]}{_last(self.log)}")

    def _stage(self, site: Path) -> PageJob:
        """The served folder: the page, onnxruntime-web's files, the model and raw input batches."""
        job = self.job
        (site / "ort").mkdir(parents=True)
        for name in PAGE_FILES:
            shutil.copyfile(PAGE / name, site / name)
        dist = ort_web_package() / "dist"
        for name in ORT_FILES:
            _link_or_copy(dist / name, site / "ort" / name)
        check_sha256(str(job.artifact), job.sha256)
        model = "model" + os.path.splitext(str(job.artifact))[1]  # the artifact's suffix
        _link_or_copy(job.artifact, site / model)
        # weights the exporter wrote beside the model (external data), served under the name
        # the model refers to them by
        external = [p.name for p in job.artifact.parent.glob(f"{job.artifact.name}.data")]
        for name in external:
            _link_or_copy(job.artifact.parent / name, site / name)
        with np.load(job.inputs, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        data, self.samples = batches(arrays, job.input_names, job.batch)
        (site / "inputs").mkdir()
        files: list[list[str]] = []
        for b, batch in enumerate(data):
            files.append([])
            for i, array in enumerate(batch):
                path = site / "inputs" / f"b{b}-i{i}.bin"
                path.write_bytes(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes())
                files[-1].append(f"inputs/{path.name}")
        inputs: list[PageInput] = [{"name": name, "dtype": _dtype(a), "shape": list(a.shape)}
                  for name, a in zip(job.input_names, data[0])]
        return {"artifact": model, "external_data": external, "inputs": inputs, "batches": files,
                "options": job.options}


def page_result(job: Job, info: PageInfo, first: float | None, timings: list[float], samples: int,
                chromium: str) -> dict[str, Any]:
    """The result document of a job run in the page (a runner's, as protocol.py has it): ``info`` is
    what the page said when it loaded the model, ``first`` its first run after the load, ``timings``
    its timed runs. The page gives no import time (onnxruntime-web loads with the page) and no memory."""
    doc = result_document(
        ok=True, runtime=job.runtime, threads=info["threads"], import_ms=None, load_ms=info["loadMs"],
        first_inference_ms=first, timings_ms=timings, other_cpu_load=None, peak_rss_mb=None,
        rss_over_baseline_mb=None, samples=samples, runtime_version=runtime_label(info, chromium),
        notes=[not_measured(["import_ms", "rss_over_baseline_mb"], PAGE_UNMEASURED)],
        browser={"chromium": chromium, "user_agent": info["userAgent"],
                 "cross_origin_isolated": info["crossOriginIsolated"],
                 "hardware_concurrency": info["hardwareConcurrency"]},
        host={"platform": "browser", "cpus": info["hardwareConcurrency"]})
    return checked_result(doc, "the browser's result")


def runtime_label(info: PageInfo, chromium: str) -> str:
    """What ran, as latency rows say it: onnxruntime-web's version, backend, threads, the browser."""
    threads = info["threads"]
    return (f"onnxruntime-web {info['ortVersion']} wasm (simd, {threads} thread{'s' if threads != 1 else ''}), "
            f"Chromium {chromium}")


def decode(output: PageOutput) -> np.ndarray:
    """One output the page sent back: base64 bytes, dtype and dims."""
    dtype = np.dtype(WEB_DTYPES.get(output["dtype"], output["dtype"])).newbyteorder("<")
    raw = base64.b64decode(output["data"])
    return np.frombuffer(raw, dtype=dtype).reshape(output["dims"]).astype(dtype.newbyteorder("="))


WEB_DTYPES = {"bool": "bool", "float32": "float32", "float64": "float64", "int64": "int64", "int32": "int32",
              "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16", "float16": "float16"}


def _dtype(array: np.ndarray) -> str:
    return "bool" if array.dtype == np.bool_ else array.dtype.name


def _last(log: list[str]) -> str:
    errors = [line for line in log if line.startswith(("page error", "console.error"))]
    return f" (browser: {errors[-1][:300]})" if errors else ""


def _link_or_copy(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)
