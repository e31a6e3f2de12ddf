"""edgeship device probe: what this device is and which of the runner's runtimes import here.

    python probe.py [FOLDER]

Copied to the device beside runner.py by ``edgeship devices check``; needs only the standard
library (it reports numpy's absence rather than failing on it). Prints one JSON document:
OS, architecture, Python, CPU count, the CPU (model, ISA flags: cpu.py), free disk in FOLDER, and
for every runtime the runner knows, its version or why it does not import.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def runtimes():
    """runtime id -> "version" or "not importable: why", for every runtime in runner.py."""
    sys.path.insert(0, HERE)
    try:
        import runner
    except Exception as e:  # numpy missing, a syntax error on an old Python: say which
        return {"(runner.py)": "not importable: %s: %s" % (type(e).__name__, e)}
    out = {}
    for name, cls in sorted(runner.load_runners().items()):
        out[name] = _import(cls)
    return out


def _import(cls):
    """The version of the runtime's own package (the last module of ``imports``), after importing the
    runtime as the runner does before a job (``import_runtime``)."""
    if not cls.imports:
        return "not checked: runner.py lists no imports for it"
    try:
        cls.import_runtime()
    except Exception as e:
        return "not importable: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0])
    mod = sys.modules.get(cls.imports[-1])
    top = cls.imports[-1].split(".")[0]
    try:
        from importlib.metadata import version
        return version(top)
    except Exception:
        return str(getattr(mod, "__version__", "importable (version unknown)"))


def cpu():
    """The CPU's facts from the companion cpu.py, or why they are missing."""
    sys.path.insert(0, HERE)
    try:
        import cpu as cpu_module
    except Exception as e:
        return {"model": None, "arch": platform.machine(), "flags": [], "source": "unknown",
                "error": "cpu.py not importable: %s: %s" % (type(e).__name__, e)}
    return cpu_module.cpu_facts()


def facts(folder):
    os.makedirs(folder, exist_ok=True)
    return {"os": "%s %s" % (platform.system(), platform.release()), "arch": platform.machine(),
            "python": "%s (%s)" % (platform.python_version(), sys.executable), "cpus": os.cpu_count(),
            "cpu": cpu(), "free_disk_bytes": shutil.disk_usage(folder).free}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    folder = argv[0] if argv else os.getcwd()
    print(json.dumps({"facts": facts(folder), "runtimes": runtimes()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
