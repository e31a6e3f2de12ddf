"""Device-side TensorRT engine builder, and the trtexec command and output parser.

    python tensorrt_engine.py engine.json      # on the Jetson: model.onnx -> model.engine

Engines are specific to the GPU and the TensorRT version, so they are built on the device. This
file is shipped there as tensorrt_engine.py, beside the ONNX model and runner.py; it needs only the standard library and
TensorRT's Python bindings (JetPack ships them). ``engine.json`` holds the settings the profile
chose (written by edgeship's tensorrt backend); ``build_engine.sh`` does the same with trtexec for
devices without the Python bindings. The timing cache is kept beside the engine, so rebuilding on
the same device is fast.

Settings: onnx, engine, precision (fp32 | fp16 | int8), workspace_mb, timing_cache (file name or
null), builder_optimization_level (0-5 or null; TensorRT 8.6+), dla_core (int or null),
gpu_fallback (bool), tensorrt_version (the version the profile targets), and for models with
dynamic dimensions shapes ({"min": {input: [dims]}, "opt": {...}, "max": {...}}: one
optimization profile; the engine takes any shape between min and max and is tuned for opt) and
run_size (which of them trtexec runs inference at; default opt).
"""
from __future__ import annotations

import json
import os
import re
import sys

DEFAULT_TRTEXEC = "/usr/src/tensorrt/bin/trtexec"  # where JetPack images put it


def major_minor(version):
    """``"10.3.0"`` -> ``(10, 3)``."""
    parts = (str(version).split(".") + ["0"])[:2]
    return int(parts[0]), int(parts[1])


def trtexec_command(settings, trtexec="trtexec"):
    """The trtexec command line that builds the engine the settings describe."""
    version = major_minor(settings["tensorrt_version"])
    cmd = [trtexec, "--onnx=%s" % settings["onnx"], "--saveEngine=%s" % settings["engine"]]
    if settings["precision"] in ("fp16", "int8"):
        cmd.append("--fp16")
    if settings["precision"] == "int8":
        cmd.append("--int8")  # explicit quantization: the Q/DQ nodes in the ONNX give the scales
    unit = "M" if version >= (8, 6) else ""
    cmd.append("--memPoolSize=workspace:%d%s" % (settings["workspace_mb"], unit))
    if settings.get("timing_cache"):
        cmd.append("--timingCacheFile=%s" % settings["timing_cache"])
    if settings.get("builder_optimization_level") is not None:
        cmd.append("--builderOptimizationLevel=%d" % settings["builder_optimization_level"])
    if settings.get("dla_core") is not None:
        cmd.append("--useDLACore=%d" % settings["dla_core"])
        if settings.get("gpu_fallback", True):
            cmd.append("--allowGPUFallback")
    return cmd + shape_flags(settings)


def shape_flags(settings):
    """--minShapes/--optShapes/--maxShapes (the optimization profile) and --shapes (the shapes
    inference runs at) for an engine with dynamic dimensions; nothing for a static one."""
    shapes = settings.get("shapes")
    if not shapes:
        return []
    flags = [("--%sShapes" % size, shapes[size]) for size in ("min", "opt", "max")]
    flags.append(("--shapes", shapes[settings.get("run_size") or "opt"]))
    return ["%s=%s" % (flag, ",".join("%s:%s" % (name, "x".join(str(d) for d in dims))
                                      for name, dims in sizes.items())) for flag, sizes in flags]


def add_profile(builder, network, config, settings):
    """One optimization profile from the settings' min/opt/max shapes (engines with dynamic
    dimensions); a network with dynamic inputs but no shapes in the settings is refused by name."""
    shapes = settings.get("shapes")
    if not shapes:
        free = ["%s %s" % (t.name, list(t.shape)) for t in (network.get_input(i) for i in range(network.num_inputs))
                if any(d < 0 for d in t.shape)]
        if free:
            raise RuntimeError("%s has dynamic dimensions (%s) but the engine settings give no min/opt/max shapes; "
                               "use the engine.json written beside it" % (settings["onnx"], ", ".join(free)))
        return
    profile = builder.create_optimization_profile()
    for name in shapes["opt"]:
        profile.set_shape(name, tuple(shapes["min"][name]), tuple(shapes["opt"][name]), tuple(shapes["max"][name]))
    config.add_optimization_profile(profile)


def build_script(settings):
    """build_engine.sh: the trtexec build for devices without TensorRT's Python bindings."""
    cmd = trtexec_command(settings, trtexec='"$TRTEXEC"')
    return "\n".join([
        "#!/usr/bin/env sh",
        "# Build the TensorRT engine on the device (engines do not carry across GPUs or TensorRT versions).",
        "# Written by edgeship from the profile's settings; see engine.json for the same in data.",
        "set -eu",
        'cd "$(dirname "$0")"',
        'TRTEXEC="${TRTEXEC:-%s}"' % DEFAULT_TRTEXEC,
        '[ -x "$TRTEXEC" ] || TRTEXEC=trtexec',
        " \\\n  ".join(cmd) + ' "$@"',
        "",
    ])


def configure(builder, config, settings, trt):
    """Apply the settings to a TensorRT builder config: precision flags, workspace, level, DLA."""
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(settings["workspace_mb"]) << 20)
    if settings["precision"] in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)
    if settings["precision"] == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
    if settings.get("builder_optimization_level") is not None:
        config.builder_optimization_level = int(settings["builder_optimization_level"])
    if settings.get("dla_core") is not None:
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = int(settings["dla_core"])
        if settings.get("gpu_fallback", True):
            config.set_flag(trt.BuilderFlag.GPU_FALLBACK)


def network_flags(trt):
    """Explicit batch: a flag before TensorRT 10, the only mode (and no flag) from 10 on."""
    if major_minor(trt.__version__) >= (10, 0):
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)


def build_engine(settings, base_dir="."):
    """Build and save the engine with the Python API; returns its path. Needs TensorRT."""
    import tensorrt as trt

    path = lambda name: os.path.join(base_dir, name)  # noqa: E731
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(path(settings["onnx"])):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError("TensorRT could not parse %s: %s" % (settings["onnx"], "; ".join(errors)))
    config = builder.create_builder_config()
    configure(builder, config, settings, trt)
    add_profile(builder, network, config, settings)
    cache_path = path(settings["timing_cache"]) if settings.get("timing_cache") else None
    if cache_path:
        blob = open(cache_path, "rb").read() if os.path.exists(cache_path) else b""
        config.set_timing_cache(config.create_timing_cache(blob), ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT failed to build an engine from %s" % settings["onnx"])
    _write(path(settings["engine"]), bytes(serialized))
    if cache_path:
        _write(cache_path, bytes(config.get_timing_cache().serialize()))
    return path(settings["engine"])


def _write(dest, data):
    tmp = dest + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, dest)


SUMMARY_LINE = re.compile(r"^(?:\[[^\]]*\]\s*)*(Latency|GPU Compute Time|Enqueue Time|H2D Latency|D2H Latency):\s*(.*)")
STAT = re.compile(r"(min|max|mean|median|percentile\((\d+)%\))\s*=?\s*([0-9.eE+-]+)\s*ms")
KEYS = {"min": "min_ms", "max": "max_ms", "mean": "mean_ms", "median": "p50_ms"}


def parse_trtexec_summary(text):
    """Statistics from trtexec's '=== Performance summary ===' block, one dict per metric, in ms.

    Handles both summary formats seen in trtexec versions ('max = 6.1 ms' and 'max 6.1 ms').
    """
    out = {}
    for line in text.splitlines():
        match = SUMMARY_LINE.match(line.strip())
        if not match:
            continue
        stats = {}
        for name, pct, value in STAT.findall(match.group(2)):
            stats["p%s_ms" % pct if pct else KEYS[name]] = float(value)
        out[match.group(1).lower().replace(" ", "_")] = stats
    qps = re.search(r"Throughput:\s*([0-9.]+)\s*qps", text)
    if qps:
        out["throughput_qps"] = float(qps.group(1))
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: tensorrt_engine.py engine.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        settings = json.load(f)
    engine = build_engine(settings, os.path.dirname(os.path.abspath(argv[0])))
    print("built %s" % engine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
