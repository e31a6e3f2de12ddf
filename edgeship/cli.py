"""The ``edgeship`` command: a thin shim over :mod:`edgeship.api`. Exit codes come from the
error types, here and nowhere else: 0 ok, 2 bad input, 3 a validation gate failed, 1 a bug."""
from __future__ import annotations

import argparse
import logging
import sys
import traceback
import warnings

from edgeship.errors import EdgeshipError, GateFailure


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edgeship", description="Take a PyTorch model to edge runtimes and prove it works there.")
    p.add_argument("--debug", action="store_true", help="show tracebacks; stop on the first lowering error")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="capture, lower, validate and report one model for one target")
    b.add_argument("--target", required=True, help="profile name (targets/NAME.toml) or path to a profile")
    b.add_argument("--model", help="model.toml, or module:callable with --input-shape (default: the demo model)")
    b.add_argument("--input-shape", help="input shape for a module:callable model, e.g. 1,3,224,224")
    b.add_argument("--out", help="output folder (default: artifacts/<target>/<model>)")
    b.add_argument("--devices", dest="devices_file", help="devices.toml naming where to measure")
    b.add_argument("--device", action="append", default=[], help="device name from --devices (repeatable)")
    b.add_argument("--trust-weights", action="store_true",
                   help="allow checkpoints that need arbitrary unpickling (can run code: only for files you trust)")
    b.add_argument("--quiet", action="store_true", help="no progress lines")
    b.add_argument("--resume", action="store_true",
                   help="reuse the measurements in the output folder's results.json; measure only what is missing or changed")
    b.add_argument("--db", help="results database URL (default: $EDGESHIP_DB, else sqlite:///artifacts/results.db)")
    d = sub.add_parser("devices", help="list the devices of a devices file, or check that one is reachable")
    d.add_argument("--devices", dest="devices_file", help="devices.toml (default: ./devices.toml if present)")
    dsub = d.add_subparsers(dest="devices_command", required=True)
    dsub.add_parser("list", help="every device: transport, address, what it runs")
    c = dsub.add_parser("check", help="reach a device: OS, architecture, Python, runtimes, free disk")
    c.add_argument("name", help="device name")
    return p


def cmd_build(args: argparse.Namespace) -> int:
    from edgeship import api
    from edgeship.reports.console import print_results

    results = api.build(args.target, args.model, input_shape=args.input_shape, out=args.out,
                        devices_file=args.devices_file, devices=args.device,
                        trust_weights=args.trust_weights, quiet=args.quiet, debug=args.debug,
                        resume=args.resume, db=args.db)
    print_results(results)
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    """``devices list`` (exit 0) or ``devices check NAME`` (exit 3 when it cannot be reached or probed)."""
    from edgeship import api
    from edgeship.devices.listing import check_text, list_text

    if args.devices_command == "list":
        print(list_text(api.devices(args.devices_file)))
        return 0
    report = api.check_device(args.name, args.devices_file)
    print(check_text(report))
    return 0 if report.reachable and report.error is None else 3


COMMANDS = {"build": cmd_build, "devices": cmd_devices}


def quiet_libraries() -> None:
    """Silence the deprecation chatter of torch and friends (kept with --debug)."""
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in ("torch", "torch.utils._pytree", "onnxscript", "executorch", "coremltools"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.debug:
        quiet_libraries()
    try:
        return COMMANDS[args.command](args)
    except GateFailure as e:
        if e.results is not None:
            from edgeship.reports.console import print_results

            print_results(e.results)
        return _fail(e, args)
    except EdgeshipError as e:
        return _fail(e, args)
    except KeyboardInterrupt:
        print("edgeship: interrupted", file=sys.stderr)
        return 130


def _fail(e: EdgeshipError, args: argparse.Namespace) -> int:
    if args.debug:
        traceback.print_exc()
    print(f"edgeship: error: {e}", file=sys.stderr)
    return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
