"""edgeship device runner: load one artifact with its runtime, time it, return timings and outputs.

    python runner.py JOB.json

Runs on the device (or in a fresh process on the host). Needs only the standard library, numpy
and the runtime the job names, so it runs on a stock JetPack or macOS Python; it is copied to the
device beside the artifact with its companions (protocol.py, hashing.py, cpu.py, and each backend's
device-side modules: ``<backend>_device.py`` with its Runner, and the helpers those import as
``<backend>_<name>.py``) and imports nothing of edgeship. The job (JSON) names the runtime, the
artifact and its sha256, an inputs ``.npz`` (one array per input, N samples), the batch size,
warmup, iterations and threads; its fields, and the result's, are protocol.py's, which the runner
checks the job against (a job of another protocol version is refused, naming both) and builds the
result through.
The runner checks the artifact's sha256 first, imports the runtime and loads the artifact (each
timed: ``import_ms``, ``load_ms``), times the first inference on the first batch on its own
(``first_inference_ms``: the first of the ``warmup`` untimed ones), times ``iterations`` inferences
on it after the warmup, reads the peak memory the runtime added (``rss_over_baseline_mb``: the peak
resident memory since just before the runtime's import, above the resident memory then), then runs
every batch and writes the outputs ``.npz`` (``out0``,
``out1``, ... in the model's flattened output order; ``out<i>.<sample>`` for an output whose length
varies by sample) and a result JSON, which also names the CPU it ran on (``cpu``). Accuracy is
computed by the host from those outputs.

Each runtime is a ``Runner`` (after Polygraphy's runners): ``load()`` the artifact, ``infer()`` a
batch, ``close()``; ``run()`` does all the timing. The runners live in their backends' packages
(``edgeship/backends/<name>/device.py``) and are found, not named: on a device, every
``*_device.py`` beside this file; on the host, where this file is edgeship.devices.runner, the
device modules the backend registry lists. The host-only ``eager`` runtime lives in
``edgeship/devices/eager.py``, which registers its runner here and calls ``main()``.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import platform
import struct
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def sibling(name):
    """Import the module shipped beside this file (hashing, cpu, a backend's device module). On the host, where this
    file is edgeship.devices.runner, that is the package's own module; on a device runner.py runs as a
    lone script, so it imports its companions by folder (which leaves sys.path again afterwards)."""
    if __package__:
        return importlib.import_module("%s.%s" % (__package__, name))
    sys.path.insert(0, HERE)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(HERE)


sha256_path = sibling("hashing").sha256_path
protocol = sibling("protocol")

RUNNERS = {}  # runtime id -> Runner subclass, filled as each subclass is defined (load_runners)
DEVICE_MODULE = "_device"  # a backend's Runner module beside this file: <backend>_device.py


def device_modules():
    """The backends' Runner modules: on a device, every ``*_device.py`` beside this file; on the host,
    those the backend registry lists (imported by name, so this file names no backend)."""
    if not __package__:
        return sorted(name[:-3] for name in os.listdir(HERE) if name.endswith(DEVICE_MODULE + ".py"))
    registry = importlib.import_module("edgeship.backends.registry")
    return sorted(module for flat, module in registry.device_modules().items() if flat.endswith(DEVICE_MODULE))


def load_runners():
    """Import every backend's Runner module (a no-op once imported); each Runner subclass registers
    itself in RUNNERS."""
    for name in device_modules():
        if __package__:
            importlib.import_module(name)
        else:
            sibling(name)
    return RUNNERS


def companion(module, name):
    """Device-side module ``name`` of the backend whose device module is ``module`` (its __name__):
    ``edgeship.backends.<backend>.<name>`` on the host, ``<backend>_<name>.py`` beside this file on a
    device (a module its spec lists in ``device_modules``)."""
    if "." in module:
        return importlib.import_module("%s.%s" % (module.rpartition(".")[0], name))
    return sibling("%s_%s" % (module[:-len(DEVICE_MODULE)], name))


class NotForThisCpu(RuntimeError):
    """The artifact is made for CPUs this one is not (a bf16 IR on a CPU without bf16 instructions):
    not run here, by design, rather than failed (its lowering names such devices)."""


class Runner:
    """How one runtime runs an artifact: ``load()`` it, ``infer()`` a batch, ``close()``.

    A subclass names its ``runtime`` id, which registers it in RUNNERS, and the modules to
    ``imports`` (``import_runtime()`` imports them) before the load timer starts, so load_ms is the
    artifact's load, not the runtime's import. ``load()`` sets ``version`` (the runtime as the report
    shows it) and may add ``notes``.
    Runners do not time themselves: ``run()`` times every runtime the same way.
    """

    runtime = None
    imports = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.runtime:
            RUNNERS[cls.runtime] = cls

    def __init__(self, path, options, threads):
        self.path = path
        self.options = options or {}
        self.threads = threads
        self.version = "unknown"
        self.notes = []

    def load(self):
        """Load the artifact at ``path``, ready to infer."""
        raise NotImplementedError

    def infer(self, arrays):
        """Outputs (a list of numpy arrays) for one batch: ``arrays``, one per input."""
        raise NotImplementedError

    def close(self):
        """Release what load() holds; default: nothing beyond what the process exit frees."""

    @classmethod
    def import_runtime(cls):
        """Import the runtime (``imports``), before the load timer starts."""
        for module in cls.imports:
            importlib.import_module(module)

    def threads_in_use(self):
        """The threads the runtime runs with when the job does not say."""
        return os.cpu_count()

    @classmethod
    def measured_elsewhere(cls, job, artifact):
        """A whole result document measured by an outside tool instead of load/infer, or None."""
        return None


def runner_class(runtime):
    """The Runner registered for ``runtime``; the error lists the ones this runner has."""
    load_runners()
    if runtime not in RUNNERS:
        raise RuntimeError("unknown runtime %r; this runner has: %s" % (runtime, ", ".join(sorted(RUNNERS))))
    return RUNNERS[runtime]


def start(cls, path, options, threads):
    """A loaded ``cls`` runner, the runtime's import time and the artifact's load time, in ms: the
    imports are timed apart, so load_ms is the artifact's load alone."""
    t0 = time.perf_counter_ns()
    cls.import_runtime()
    import_ms = (time.perf_counter_ns() - t0) / 1e6
    runner = cls(path, options, threads)
    t0 = time.perf_counter_ns()
    runner.load()
    return runner, import_ms, (time.perf_counter_ns() - t0) / 1e6


def open_runner(runtime, path, options=None, threads=None):
    """A loaded runner for ``runtime``, loaded exactly as a job loads it; close() it when done."""
    return start(runner_class(runtime), path, options or {}, threads)[0]


def to_numpy_list(out):
    """Flatten a runtime's outputs (tensor, array, tuple, list, dict) into a list of numpy arrays."""
    if isinstance(out, dict):
        out = list(out.values())
    if not isinstance(out, (list, tuple)):
        out = [out]
    flat = []
    for o in out:
        if isinstance(o, (list, tuple, dict)):
            flat.extend(to_numpy_list(o))
        elif hasattr(o, "detach"):
            flat.append(o.detach().cpu().numpy())
        else:
            flat.append(np.asarray(o))
    return flat


class TorchRunner(Runner):
    """What the runtimes running a torch module share: torch's thread count, tensors in and out."""

    def set_threads(self):
        import torch

        if self.threads:
            torch.set_num_threads(int(self.threads))

    def use(self, module):
        """Infer with ``module`` (a callable on torch tensors)."""
        import torch

        self._torch, self._module = torch, module
        self.version = "torch " + torch.__version__.split("+")[0]

    def infer(self, arrays):
        torch = self._torch
        with torch.inference_mode():
            return to_numpy_list(self._module(*[torch.from_numpy(a) for a in arrays]))

    def threads_in_use(self):
        return self._torch.get_num_threads()


def dist_version(dist):
    """The installed version of distribution ``dist``, or "unknown"."""
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "unknown"


def peak_rss_mb():
    """Peak resident set size of this process in MiB, or None where the OS does not say.

    On Linux this reads VmHWM: getrusage's ru_maxrss survives exec, so a runner started from a
    large parent would report the parent's peak.
    """
    status = memory_status()
    if status is not None:
        return status[1]
    try:
        import resource
    except ImportError:
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024.0 * 1024.0) if sys.platform == "darwin" else rss / 1024.0


STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"


def memory_status():
    """(VmRSS, VmHWM) of this process in MiB, from /proc/self/status (Linux); None elsewhere."""
    found = {}
    try:
        with open(STATUS) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    found[line[:5]] = int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        return None
    if len(found) < 2:
        return None
    return found["VmRSS"], found["VmHWM"]


def reset_peak():
    """Reset this process's peak resident memory (VmHWM) to its current resident memory: writing 5
    to /proc/self/clear_refs (Linux 4.0 and later). Whether it was."""
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class MemoryBaseline:
    """This process's resident memory before the runtime is imported, and its peak since.

    ``over()`` is the peak resident memory since the baseline above the baseline: what importing the
    runtime, loading the artifact and running it added, without the interpreter, numpy and the
    inputs. The kernel's peak (VmHWM) is reset to the current resident memory at the baseline, so the
    peak read later is the peak since; where it cannot be reset, the peak read later still is when it
    was not above the resident memory at the baseline. Otherwise, or where the OS does not give
    the current resident memory, ``over()`` is None and ``why`` says why: never a peak that could
    be the earlier one's. ``process_peak()`` stays the whole process's peak (peak_rss_mb)."""

    def __init__(self):
        status = memory_status()
        self.why = None
        self.rss = self.peak_before = None
        if status is None:
            self.why = "this OS gives no current resident memory (%s): only the whole process's peak" % STATUS
            return
        self.rss, self.peak_before = status
        if not reset_peak() and self.peak_before > self.rss:
            self.why = ("%s cannot be written to reset the peak, and the process's peak before the runtime was "
                        "imported (%.1f MiB) is above its resident memory then (%.1f MiB): a later peak cannot be "
                        "told from that one" % (CLEAR_REFS, self.peak_before, self.rss))

    def over(self):
        """The peak resident memory since the baseline above it, in MiB, or None (``why`` says why)."""
        status = None if self.why else memory_status()
        if status is None:
            return None
        return max(0.0, status[1] - self.rss)

    def process_peak(self):
        """The whole process's peak resident memory in MiB (its peak before the baseline included)."""
        peak = peak_rss_mb()
        if peak is None or self.peak_before is None:
            return peak
        return max(peak, self.peak_before)


def is_stored(info):
    """Whether zip member ``info`` is stored uncompressed and unencrypted (as numpy.savez writes it)."""
    import zipfile

    return info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1


def stored_offset(raw, info):
    """Where the bytes of zip member ``info`` start in the open file ``raw`` when ``is_stored``; else None."""
    if not is_stored(info):
        return None
    raw.seek(info.header_offset + 26)  # the local file header: its name and extra field lengths
    lengths = raw.read(4)
    if len(lengths) < 4:
        raise ValueError("a zip member's local header is cut short")
    name_len, extra_len = struct.unpack("<HH", lengths)
    return info.header_offset + 30 + name_len + extra_len


def load_npz(path):
    """The arrays of an .npz by name. Those stored uncompressed (numpy.savez, as edgeship writes
    them) are memory-mapped copy-on-write (writable; a write never reaches the file), so a large
    evaluation set is paged in a batch at a time instead of read whole; the rest are read."""
    import zipfile

    out = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as raw:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):  # not an array (np.load would return its bytes)
                continue
            name = info.filename[:-4]
            start = stored_offset(raw, info)
            if start is not None:
                raw.seek(start)
                version = np.lib.format.read_magic(raw)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, fortran, dtype = read_header(raw)
                if not dtype.hasobject and all(shape):
                    out[name] = np.memmap(path, dtype=dtype, mode="c", offset=raw.tell(), shape=shape,
                                          order="F" if fortran else "C")
                    continue
            with zf.open(info) as f:
                out[name] = np.lib.format.read_array(f, allow_pickle=False)
    return out


def batches(inputs, names, batch):
    """Split N samples into batches of ``batch``, padding the last by repeating its final sample."""
    n = len(inputs[names[0]])
    out = []
    for start in range(0, n, batch):
        part = [inputs[k][start:start + batch] for k in names]
        short = batch - len(part[0])
        if short:
            part = [np.concatenate([a, np.repeat(a[-1:], short, axis=0)]) for a in part]
        out.append([np.ascontiguousarray(a) for a in part])
    return out, n


def merge_batches(per_batch, batch, n):
    """One entry per output from the outputs of every batch (lists in the same order): an array
    [n, ...] when every batch's output has the batch first, else (the length varies: detections
    after NMS) a list with one array per sample, which needs a batch of 1."""
    counts = set(len(o) for o in per_batch)
    if len(counts) > 1:
        raise RuntimeError("the artifact returned %s outputs for different batches" % sorted(counts))
    merged = []
    for i in range(len(per_batch[0])):
        parts = [np.asarray(o[i]) for o in per_batch]
        if all(p.ndim and p.shape[0] == batch for p in parts) and len(set(p.shape for p in parts)) == 1:
            merged.append(np.concatenate(parts)[:n])
        elif batch == 1:
            merged.append(parts[:n])
        else:
            raise RuntimeError("output %d has shapes %s, not [%d, ...] for a batch of %d: outputs whose length "
                               "varies by sample need a batch of 1" % (i, [list(p.shape) for p in parts[:3]],
                                                                        batch, batch))
    return merged


def encode_outputs(merged):
    """The npz entries of merged outputs: ``out<i>`` for an array, ``out<i>.<sample>`` per sample of a
    list (``out<i>.count`` holds the sample count, so a list of none is kept too)."""
    entries = {}
    for i, value in enumerate(merged):
        if isinstance(value, list):
            entries["out%d.count" % i] = np.asarray(len(value))
            for s, part in enumerate(value):
                entries["out%d.%d" % (i, s)] = part
        else:
            entries["out%d" % i] = value
    return entries


def decode_outputs(npz):
    """The merged outputs back from :func:`encode_outputs`' entries (a loaded npz or a dict)."""
    files = set(npz.files if hasattr(npz, "files") else npz)
    merged = []
    while True:
        i = len(merged)
        if "out%d" % i in files:
            merged.append(npz["out%d" % i])
        elif "out%d.count" % i in files:
            merged.append([npz["out%d.%d" % (i, s)] for s in range(int(npz["out%d.count" % i]))])
        else:
            return merged


def check_sha256(artifact, expected):
    """Refuse an artifact that is not the one the host measured for (a stale or partial copy)."""
    if artifact and expected:
        actual = sha256_path(artifact)
        if actual != expected:
            raise RuntimeError("artifact %s: sha256 %s does not match the expected %s" % (artifact, actual, expected))


def time_inference(runner, batch, warmup, iterations):
    """Milliseconds of each of ``iterations`` inferences on ``batch``, after ``warmup`` untimed ones,
    and how many CPUs other processes kept busy meanwhile (``other_cpu_load``; None where unknown)."""
    for _ in range(warmup):
        runner.infer(batch)
    timings = []
    before = cpu_time_snapshot()
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        runner.infer(batch)
        timings.append((time.perf_counter_ns() - t0) / 1e6)
    return timings, other_cpu_load(before, cpu_time_snapshot())


def time_runs(runner, batch, warmup, iterations):
    """The first inference after load timed on its own, then :func:`time_inference`: (first ms,
    timings, other_cpu_load). The first run is the first of the ``warmup`` ones, so the timed runs
    are the same as without it; with no warmup it is the first timed run (first ms = timings[0])."""
    if not warmup:
        timings, other_load = time_inference(runner, batch, 0, iterations)
        return (timings[0] if timings else None), timings, other_load
    t0 = time.perf_counter_ns()
    runner.infer(batch)
    first = (time.perf_counter_ns() - t0) / 1e6
    timings, other_load = time_inference(runner, batch, warmup - 1, iterations)
    return first, timings, other_load


def cpu_time_snapshot():
    """(wall seconds, CPU seconds every process on this machine used, CPU seconds this process used),
    from /proc/stat (Linux); None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait
    busy = sum(fields[:8]) - fields[3] - fields[4]
    own = os.times()
    return time.perf_counter(), float(busy) / hz, own[0] + own[1]


def other_cpu_load(before, after):
    """CPUs' worth of work other processes did while the iterations were timed: 0 on a quiet machine,
    1.0 when another process kept one core busy (the timings then show a shared machine)."""
    if before is None or after is None or after[0] - before[0] < 0.05:
        return None
    wall = after[0] - before[0]
    others = (after[1] - before[1]) - (after[2] - before[2])
    return round(max(0.0, others / wall), 2)


def run(job, base):
    """Do the job (checked, with every field: ``protocol.job_with_defaults``); return the result
    document (raises on failure)."""
    resolve = lambda p: p if os.path.isabs(p) else os.path.join(base, p)  # noqa: E731
    cls = runner_class(job["runtime"])
    artifact = resolve(job["artifact"]) if job["artifact"] else None
    check_sha256(artifact, job["sha256"])
    inputs = load_npz(resolve(job["inputs"]))  # a large evaluation set: paged in a batch at a time
    data, n = batches(inputs, job["input_names"], job["batch"])
    measured = cls.measured_elsewhere(job, artifact)
    if measured is not None:
        return measured
    memory = MemoryBaseline()  # before the runtime's import: the interpreter, numpy and the inputs are below it
    runner, import_ms, load_ms = start(cls, artifact, job["options"], job["threads"])
    try:
        iterations = job["iterations"]  # 0: outputs only (a dynamic model at its min or max size)
        warmup = job["warmup"] if iterations else 0
        first_ms, timings, other_load = time_runs(runner, data[0], warmup, iterations)
        over = memory.over()  # the runtime's peak, before the evaluation pass holds every output
        # own copies: a view of torch's output kept ~50 KB of the runtime's memory alive per batch
        # (1.1 GB over 21,900 batches, measured); the timed runs above are not copied
        outputs = [[np.array(o) for o in runner.infer(b)] for b in data]
        threads = job["threads"] or runner.threads_in_use()
    finally:
        runner.close()
    merged = merge_batches(outputs, job["batch"], n)
    np.savez(resolve(job["outputs"]), **encode_outputs(merged))
    return protocol.result_document(
        ok=True, runtime=job["runtime"], runtime_version=runner.version, threads=threads,
        warmup=warmup, iterations=iterations, import_ms=import_ms, load_ms=load_ms, first_inference_ms=first_ms,
        timings_ms=timings, other_cpu_load=other_load, peak_rss_mb=memory.process_peak(),
        rss_over_baseline_mb=over if iterations else None, samples=n, outputs=job["outputs"],
        notes=runner.notes + memory_notes(memory, iterations),
        host={"platform": platform.platform(), "machine": platform.machine(),
              "python": platform.python_version(), "cpus": os.cpu_count()},
    )


def memory_notes(memory, iterations):
    """Why rss_over_baseline_mb is null, as the latency row says it."""
    if not iterations:
        return []  # outputs only: nothing timed, and the host's note says so
    return [] if memory.why is None else [protocol.not_measured(["rss_over_baseline_mb"], memory.why)]


def cpu_facts():
    """This device's CPU (model, architecture, the ISA flags that decide int8 kernels) from the
    companion cpu.py; None when it is not beside this file (a runner copied alone)."""
    try:
        return sibling("cpu").cpu_facts()
    except ImportError:
        return None


def stop_at_deadline(seconds):
    """Stop this runner at the job's deadline (POSIX), so a job whose host gave up on it, or
    whose connection dropped, does not keep the device busy while the next job is timed."""
    import signal

    if not seconds or not hasattr(signal, "SIGALRM"):
        return

    def expire(signum, frame):
        raise TimeoutError("the runner stopped itself at the job's %.0f s timeout" % seconds)
    signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(-(-seconds // 1))))


def refusal(job, problems):
    """Why this runner refuses ``job``: written in another protocol version (both named), or its problems."""
    version = protocol.other_version(job)
    if version is not None:
        return ("job.json is device protocol %r; this runner.py reads and writes protocol %d: it was written by "
                "another edgeship than the one this runner.py came with (a runner left on the device from an "
                "older or newer edgeship? run the job with the runner.py of the edgeship that wrote it)"
                % (version, protocol.PROTOCOL_VERSION))
    return "job.json does not follow device protocol %d: %s" % (protocol.PROTOCOL_VERSION, "; ".join(problems))


def main(argv=None):
    """Run the job file named on the command line; write its result JSON (a failure included)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: runner.py JOB.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    base = os.path.dirname(os.path.abspath(argv[0]))
    name = job.get("result") if isinstance(job, dict) else None
    result_path = os.path.join(base, name if isinstance(name, str) else protocol.JOB["result"].default)
    try:
        problems = protocol.job_problems(job)
        if problems:
            raise protocol.ProtocolError(refusal(job, problems))
        job = protocol.job_with_defaults(job)
        stop_at_deadline(job["deadline_s"])
        result = run(job, base)
        result["cpu"] = cpu_facts()
        problems = protocol.result_problems(result)
        if problems:  # this runner's own slip: fail here rather than hand the host a result it misreads
            raise protocol.ProtocolError("the runner's result does not follow device protocol %d: %s"
                                         % (protocol.PROTOCOL_VERSION, "; ".join(problems)))
        code = 0
    except Exception as e:  # the host reads the failure from the result, with the traceback
        mine = isinstance(e, (NotForThisCpu, protocol.ProtocolError))  # its message says it all
        result = protocol.result_document(
            ok=False, error=str(e) if mine else "%s: %s" % (type(e).__name__, e),
            traceback=traceback.format_exc(), not_for_this_cpu=isinstance(e, NotForThisCpu))
        code = 1
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return code


if __name__ == "__main__":
    sys.modules.setdefault("runner", sys.modules[__name__])  # the one the backends' Runner modules import
    code = main()
    gc.freeze()  # the result is written: exit without a last full collection of torch's heap (0.7 s)
    sys.exit(code)
