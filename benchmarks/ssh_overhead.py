"""The cost of measuring over SSH: the same artifact timed by the runner locally and through the
ssh transport, interleaved round by round (local, ssh, then ssh, local, ...), on this machine.

By default the ssh device is a throwaway OpenSSH server on 127.0.0.1 (tests/devices/sshd.py), so
both paths run the same runner on the same CPU and any difference is the SSH path's own: the
copy of artifact + inputs + runner, three short connections, the remote shell, the clean-up.
It prints, per artifact, the median over rounds of the runner's p50 both ways (should be ~1.0:
the runner times inside the device) and of the wall time of a whole job (what a build waits for).
Nothing is asserted; these are figures from one run on a shared machine.

    python benchmarks/ssh_overhead.py [--rounds 7] [--iterations 200]
    python benchmarks/ssh_overhead.py --devices devices.toml --device orin   # a real device
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from edgeship.devices import Job, LocalDevice  # noqa: E402
from edgeship.devices.config import load_devices  # noqa: E402
from edgeship.devices.hashing import sha256_file  # noqa: E402
from edgeship.model import load_model  # noqa: E402
from edgeship.spec import demo_spec_path, load_spec  # noqa: E402


def artifacts(folder: Path) -> dict[str, tuple[str, Path]]:
    """The demo model (DigitNet) as a lite-interpreter .ptl and an ONNX file."""
    import torch

    model = load_model(load_spec(demo_spec_path()))
    example = model.example_inputs
    traced = torch.jit.freeze(torch.jit.trace(model.module, example))
    traced._save_for_lite_interpreter(str(folder / "digitnet.ptl"))
    torch.onnx.export(model.module, example, str(folder / "digitnet.onnx"), input_names=["input"], dynamo=False)
    return {"pytorch-mobile .ptl": ("pytorch-mobile", folder / "digitnet.ptl"),
            "onnxruntime .onnx": ("onnxruntime", folder / "digitnet.onnx")}


def ssh_device(args: argparse.Namespace, folder: Path):
    """The device to compare with: the named one, or a throwaway sshd on this machine."""
    if args.devices:
        return load_devices(args.devices).device(args.device), None
    from tests.devices import sshd

    why = sshd.missing()
    if why:
        sys.exit(f"ssh_overhead: {why}")
    server = sshd.start(folder / "sshd")
    (folder / "devices.toml").write_text(server.device_toml("loopback"))
    return load_devices(folder / "devices.toml").device("loopback"), server


def one_job(device, job: Job, workdir: Path) -> tuple[float, float]:
    """(runner p50 in ms, wall seconds of the whole job) for one run of ``job`` on ``device``."""
    start = time.perf_counter()
    result = device.run_job(job, workdir)
    return float(np.percentile(result.document["timings_ms"], 50)), time.perf_counter() - start


def compare(local, remote, job: Job, rounds: int, folder: Path) -> dict[str, list[tuple[float, float]]]:
    runs: dict[str, list[tuple[float, float]]] = {"local": [], "ssh": []}
    devices = {"local": local, "ssh": remote}
    for r in range(rounds):
        for name in (("local", "ssh") if r % 2 == 0 else ("ssh", "local")):
            runs[name].append(one_job(devices[name], job, folder / f"{name}-{r}"))
    return runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--devices", help="devices.toml with a real ssh device (default: a throwaway sshd here)")
    p.add_argument("--device", help="the ssh device's name in --devices")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgeship-ssh-bench-") as tmp:
        folder = Path(tmp)
        remote, server = ssh_device(args, folder)
        try:
            report(remote, folder, args)
        finally:
            remote.close()
            if server is not None:
                server.stop()
    return 0


def report(remote, folder: Path, args: argparse.Namespace) -> None:
    inputs = folder / "inputs.npz"
    np.savez(inputs, input=np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32))
    print(f"ssh device: {remote.name} ({remote.address}); {args.rounds} interleaved rounds, "
          f"{args.iterations} timed iterations per job, 1 thread\n")
    print(f"{'artifact':<22} {'p50 local':>10} {'p50 ssh':>10} {'ratio':>6}   {'job local':>10} {'job ssh':>10} "
          f"{'ratio':>6} {'+ per job':>10}")
    for label, (runtime, path) in artifacts(folder).items():
        job = Job(runtime=runtime, artifact=path, sha256=sha256_file(path), inputs=inputs, input_names=["input"],
                  batch=1, warmup=20, iterations=args.iterations, threads=1, timeout_s=600)
        runs = compare(LocalDevice(), remote, job, args.rounds, folder)
        (pl, wl), (ps, ws) = [tuple(statistics.median(v) for v in zip(*runs[k])) for k in ("local", "ssh")]
        print(f"{label:<22} {pl:>8.4f}ms {ps:>8.4f}ms {ps / pl:>6.2f}   {wl:>9.2f}s {ws:>9.2f}s {ws / wl:>6.2f} "
              f"{(ws - wl) * 1000:>8.0f}ms")


if __name__ == "__main__":
    sys.exit(main())
