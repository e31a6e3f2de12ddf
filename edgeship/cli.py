"""The ``edgeship`` command: a thin shim over :mod:`edgeship.api`. Exit codes come from the
error types, here and nowhere else: 0 ok, 2 bad input, 3 a validation gate failed, 1 the environment or a bug,
130/143/129 interrupted (see BUILD_EXIT)."""
from __future__ import annotations

import argparse
import logging
import math
import sys
import traceback
import warnings

from edgeship import stopping
from edgeship.errors import EdgeshipError, GateFailure, os_failure, user_code_exit

BUILD_EXIT = """exit status:
  0    every variant built (with --variant: each one named), measured where its profile says, and passed
       (a variant no device here can run by design, e.g. a GPU runtime on a machine without that GPU, is
       marked "not measured here")
  2    bad input: profile, model spec, weights, data, devices file, user code that exited or ran past
       its [limits] limit; an output folder another build is using, with --no-wait; a results store
       of another schema revision (edgeship store upgrade); a state folder or key another user could
       control
  3    a gate failed, a variant could not be built, a stage ran past its [limits] limit, or a runner
       ended without a result
  1    the environment (a write the machine refused: the path and the reason), native code that held
       the interpreter past its limit (stacks in .work/watchdog-stacks.txt), or a bug
  130  interrupted (Ctrl-C); 143: SIGTERM; 129: SIGHUP (the terminal closed). The previous build in the
       folder stays as it was."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edgeship",
                                description="Take a PyTorch model to edge runtimes and prove it works there.")
    p.add_argument("--debug", action="store_true", help="show tracebacks; stop on the first lowering error")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="capture, lower, validate and report one model for one target",
                       epilog=BUILD_EXIT, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--target", required=True, help="profile name (targets/NAME.toml) or path to a profile")
    b.add_argument("--model", help="model.toml, or module:callable with --input-shape (default: the demo model)")
    b.add_argument("--input-shape", help="input shape for a module:callable model, e.g. 1,3,224,224")
    b.add_argument("--out", help="output folder (default: artifacts/<target>/<model>)")
    b.add_argument("--devices", dest="devices_file", help="devices.toml naming where to measure")
    b.add_argument("--device", action="append", default=[], help="device name from --devices (repeatable)")
    b.add_argument("--variant", action="append", metavar="NAME",
                   help="build only this variant of the profile, with the eager reference (repeatable; `edgeship "
                        "targets` lists each profile's variants; a name the profile lacks: exit 2). The other "
                        "variants' rows and files from the build already in the output folder are kept while they "
                        "still hold (same artifact, measurements still valid), else left out and their folders "
                        "removed. Only the variants named decide the exit status")
    b.add_argument("--trust-weights", action="store_true",
                   help="allow checkpoints that need arbitrary unpickling (can run code: only for files you trust)")
    b.add_argument("--quiet", action="store_true", help="no progress lines")
    b.add_argument("--resume", action="store_true",
                   help="reuse the measurements in the output folder's results.json; measure only what is missing or "
                        "changed (the default unless --remeasure; this flag also reports what it reuses)")
    b.add_argument("--remeasure", action="store_true",
                   help="measure every variant again, even when the artifact and settings are unchanged")
    b.add_argument("--db", help="results database URL (default: $EDGESHIP_DB, else sqlite:///artifacts/results.db)")
    b.add_argument("--no-wait", action="store_true",
                   help="when another build is using the output folder, stop (exit 2) instead of waiting for it")
    d = sub.add_parser("devices", help="list the devices of a devices file, or check that one is reachable")
    d.add_argument("--devices", dest="devices_file", help="devices.toml (default: ./devices.toml if present, said on "
                                                          "stderr; it may not change a built-in device)")
    dsub = d.add_subparsers(dest="devices_command", required=True)
    dsub.add_parser("list", help="every device: transport, address, what it runs")
    c = dsub.add_parser("check", help="reach a device: OS, architecture, Python, runtimes, free disk")
    c.add_argument("name", help="device name")
    u = dsub.add_parser("setup", help="prepare what an emulated Arm device runs in (once; arm64-emulated: an aarch64 "
                                      "Python with torch and the pinned aarch64 runtimes, ~0.9 GB)")
    u.add_argument("name", help="device name (transport qemu, arch aarch64)")
    add_targets_parser(sub)
    add_report_parser(sub)
    add_bundle_parser(sub)
    add_matrix_parser(sub)
    k = sub.add_parser("cache", help="the stage cache under artifacts/.cache (or $EDGESHIP_CACHE_DIR)")
    k.add_argument("cache_command", choices=["clear", "info"],
                   help="clear: delete every entry (only what edgeship wrote there); info: where and how big")
    s = sub.add_parser("store", help="the results store (the database every build records into)")
    s.add_argument("store_command", choices=["upgrade"],
                   help="upgrade: migrate it to this edgeship's schema revision (the only command that does; "
                        "an older edgeship refuses it after that)")
    s.add_argument("--db", help="results database URL (default: $EDGESHIP_DB, else sqlite:///artifacts/results.db)")
    return p


def add_matrix_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("matrix", help="build every model of a matrix file for every target and measure them on its "
                                      "devices, here or on a Ray cluster; writes each build folder and matrix.md")
    m.add_argument("file", help="matrix file (models, targets, devices): see examples/matrix.toml")
    m.add_argument("--out", required=True, help="folder for the builds (<out>/<target>/<model>/) and the report")
    m.add_argument("--ray", metavar="auto|ADDRESS",
                   help="run the builds as Ray tasks: auto ($RAY_ADDRESS, else a local cluster started here) or a "
                        "cluster address (ray://head:10001, head:6379); unset: one build after another here")
    m.add_argument("--db", help="results database every build records into (default: $EDGESHIP_DB, else "
                                "sqlite:///artifacts/results.db); on a cluster, a PostgreSQL URL")
    m.add_argument("--num-cpus", type=finite_float, help="CPUs each build task asks Ray for (default: the matrix "
                                                         "file's num_cpus, else 1)")
    lab = sub.add_parser("lab", help="a lab machine's part in a Ray cluster")
    lsub = lab.add_subparsers(dest="lab_command", required=True)
    node = lsub.add_parser("node", help="start a Ray worker on this machine that owns the devices of a devices "
                                        "file (a custom resource device:<name> each)")
    node.add_argument("--devices", dest="devices_file", required=True, help="devices.toml of the devices attached here")
    node.add_argument("--address", required=True, help="the Ray head, e.g. head:6379")
    node.add_argument("--device", action="append", default=[], help="only these devices of the file (repeatable)")
    node.add_argument("--num-cpus", type=int, help="CPUs this node offers to build tasks (default: Ray's: all)")


def finite_float(text: str) -> float:
    """An argparse type: a finite number (nan and inf are refused, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; finite numbers only")
    return value


def add_targets_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("targets", help="the profiles --target NAME accepts, with their variants and devices",
                       description="Without a command: every profile build --target NAME accepts (./targets/*.toml "
                                   "in the working folder first, then the built-in ones), one row per variant: "
                                   "backend, precision, the devices measured on without --device, the file. A "
                                   "table on a terminal, plain text otherwise. Exit 2 when a profile does not load "
                                   "(it is listed with its error).")
    tsub = t.add_subparsers(dest="targets_command")
    show = tsub.add_parser("show", help="one profile as a build uses it, every setting with its default filled in "
                                        "(JSON; null: unset)")
    show.add_argument("name", help="profile name (targets/NAME.toml) or path to a profile")


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("report",
                       help="report.md, report.html and results.csv from results files and/or the results store")
    r.add_argument("results", nargs="*", metavar="RESULTS.json", help="results.json files (one build each)")
    r.add_argument("--db",
                   help="results store URL (SQLAlchemy, e.g. sqlite:///artifacts/results.db) to compare against")
    r.add_argument("--out", help="output folder (default: the results file's folder, or artifacts/report)")
    r.add_argument("--model", help="only this model's rows from the store")
    r.add_argument("--target", help="only this target's rows from the store")
    r.add_argument("--threshold", type=finite_float, default=10.0,
                   help="p50 slower than the previous build by more than this %% is a regression (default 10)")
    r.add_argument("--top1-tolerance", type=finite_float, default=0.0,
                   help="top-1 lower by more than this many points is a regression (default 0)")
    r.add_argument("--fail-on-regression", action="store_true",
                   help="exit 3 when a regression is found (reports are still written)")


def add_bundle_parser(sub: argparse._SubParsersAction) -> None:
    u = sub.add_parser("bundle", help="app bundles of a finished build, or check one: edgeship bundle verify FILE.zip",
                       usage="edgeship bundle --target T [--model SPEC] [--platform P ...] [--variants SEL]\n"
                             "       edgeship bundle verify FILE.zip [--public-key PUB] [--signature SIG] "
                             "[--extract DIR]\n"
                             "       edgeship bundle sign FILE.zip --key KEY [--signature SIG]\n"
                             "       edgeship bundle keygen KEY")
    u.add_argument("action", nargs="?", choices=list(BUNDLE_ACTION_OPTIONS)[1:],
                   help="verify: check FILE.zip (or a web bundle's unpacked folder) against its manifest (and "
                        "signature, with --public-key); "
                        "sign: write FILE.zip.sig; keygen: write an Ed25519 key pair KEY and KEY.pub")
    u.add_argument("file", nargs="?", metavar="FILE", help="the bundle to verify or sign; for keygen, the key file")
    u.add_argument("--extract", metavar="DIR", help="with verify: extract the checked bundle into DIR")
    u.add_argument("--public-key", metavar="PUB",
                   help="with verify: check the bundle's signature with this Ed25519 public key (PEM or OpenSSH)")
    u.add_argument("--key", metavar="KEY", help="with sign: the Ed25519 private key (PEM or OpenSSH)")
    u.add_argument("--signature", metavar="SIG", help="with verify or sign: the signature file (default FILE.zip.sig)")
    u.add_argument("--target", help="profile name or path of the build to bundle")
    u.add_argument("--model", help="model.toml or module:callable of the build (default: the demo model)")
    u.add_argument("--input-shape", help="input shape for a module:callable model")
    u.add_argument("--out", help="the build's folder (default: artifacts/<target>/<model>)")
    u.add_argument("--platform", action="append", choices=["android", "ios", "jetson", "web", "linux", "x86"],
                   help="platform to bundle for (repeatable; default: the profile's [bundle] platforms); web also "
                        "writes the bundle unpacked beside its zip, ready to serve")
    u.add_argument("--variants", help="passing, fastest, or comma-separated variant names (default: the profile's)")


# Which options each form of `edgeship bundle` takes (None: making bundles from a build).
BUNDLE_ACTION_OPTIONS: dict[str | None, tuple[str, ...]] = {
    None: ("target", "model", "input_shape", "out", "platform", "variants"),
    "verify": ("extract", "public_key", "signature"),
    "sign": ("key", "signature"),
    "keygen": (),
}


def cmd_build(args: argparse.Namespace) -> int:
    from edgeship import api
    from edgeship.reports.console import print_results

    results = api.build(args.target, args.model, input_shape=args.input_shape, out=args.out,
                        devices_file=args.devices_file, devices=args.device,
                        trust_weights=args.trust_weights, quiet=args.quiet, debug=args.debug,
                        resume=args.resume, remeasure=args.remeasure, db=args.db,
                        no_wait=args.no_wait, variants=args.variant)
    print_results(results)
    return 0


def cmd_targets(args: argparse.Namespace) -> int:
    """``targets`` (exit 2 when a profile does not load) or ``targets show NAME`` (exit 2 for an unknown name)."""
    import json

    from edgeship import api
    from edgeship.errors import ProfileError
    from edgeship.reports.targets import print_targets

    if args.targets_command == "show":
        print(json.dumps(api.target(args.name), indent=2))
        return 0
    entries = api.targets()
    print_targets(entries)
    broken = [e for e in entries if e.error is not None]
    if broken:
        raise ProfileError(f"{len(broken)} profile(s) cannot be used: " + "; ".join(e.error for e in broken))
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from edgeship import api

    if args.cache_command == "clear":
        summary = api.cache_clear()
        print(f"cleared {summary.root}: {summary.entries} entries, {summary.bytes / (1 << 20):.1f} MiB")
        for line in summary.kept:
            print(f"kept {summary.root}/{line}")
    else:
        root, entries, size = api.cache_info()
        print(f"{root}: {entries} entries, {size / (1 << 20):.1f} MiB")
    return 0


def cmd_store(args: argparse.Namespace) -> int:
    """``store upgrade``: the revision before and after."""
    from edgeship import api

    print(api.store_upgrade(args.db))
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    """``devices list`` (exit 0), ``devices check NAME`` (exit 3 when it cannot be reached or probed)
    or ``devices setup NAME`` (exit 1 when the root cannot be made)."""
    from edgeship import api
    from edgeship.devices.listing import check_text, list_text

    if args.devices_command == "list":
        print(list_text(api.devices(args.devices_file)))
        return 0
    if args.devices_command == "setup":
        api.setup_device(args.name, args.devices_file)
        return 0
    report = api.check_device(args.name, args.devices_file)
    print(check_text(report))
    return 0 if report.reachable and report.error is None else 3


def cmd_report(args: argparse.Namespace) -> int:
    from edgeship import api

    written = api.report(args.results, db=args.db, out=args.out, model=args.model, target=args.target,
                         threshold_pct=args.threshold, top1_tolerance=args.top1_tolerance,
                         fail_on_regression=args.fail_on_regression)
    for path in written.paths:
        print(f"wrote {path}")
    for line in written.notes:
        print(f"note: {line}")
    for line in written.regressions:
        print(f"regression: {line}")
    return 0


def cmd_bundle(args: argparse.Namespace) -> int:
    from edgeship import api
    from edgeship.errors import BundleError

    allowed = BUNDLE_ACTION_OPTIONS[args.action]
    for option in (o for opts in BUNDLE_ACTION_OPTIONS.values() for o in opts):
        if getattr(args, option) is not None and option not in allowed:
            form = f"bundle {args.action}" if args.action else "bundle --target"
            takes = ", ".join("--" + o.replace("_", "-") for o in allowed) or "no options"
            raise BundleError(f"edgeship {form}: --{option.replace('_', '-')} does not apply here (it takes: {takes})")
    if args.action and not args.file:
        example = {"verify": "verify model-android.zip", "sign": "sign model-android.zip --key signing.pem",
                   "keygen": "keygen signing.pem"}[args.action]
        raise BundleError(f"edgeship bundle {args.action}: give the file, e.g. edgeship bundle {example}")
    if args.action == "verify":
        check = (api.extract_bundle(args.file, args.extract, public_key=args.public_key, signature=args.signature)
                 if args.extract else api.verify_bundle(args.file, public_key=args.public_key,
                                                        signature=args.signature))
        print(f"ok: {check.path}: {check.platform} bundle, {check.files} files ({check.bytes:,} bytes) "
              f"match manifest.json; {check.authenticity}"
              + (f"; extracted into {args.extract}" if args.extract else ""))
        return 0
    if args.action == "sign":
        if not args.key:
            raise BundleError("edgeship bundle sign: give --key KEY (an Ed25519 private key; "
                              "make one with: edgeship bundle keygen KEY)")
        signed = api.sign_bundle(args.file, args.key, signature=args.signature)
        print(f"signed {args.file}: wrote {signed.path} (Ed25519, key {signed.key_id})")
        return 0
    if args.action == "keygen":
        private, public, key_id = api.bundle_keygen(args.file)
        print(f"wrote {private} (private key, mode 0600: keep it secret) and {public} (public key {key_id}: "
              "give it to whoever verifies)")
        return 0
    if not args.target or args.file:
        raise BundleError("edgeship bundle: give --target (and --model) of a finished build, "
                          "or: edgeship bundle verify FILE.zip")
    for b in api.bundle(args.target, args.model, input_shape=args.input_shape, out=args.out,
                        platforms=args.platform, variants=args.variants):
        unpacked = f" and {b.folder}/ (unpacked)" if b.folder else ""
        print(f"wrote {b.path}{unpacked}: {', '.join(row.name for row, _ in b.selection.chosen)}")
        for line in b.selection.warnings:
            print(f"warning: {line}")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from edgeship import api
    from edgeship.matrix.spec import MatrixError

    if args.num_cpus is not None and args.num_cpus <= 0:
        raise MatrixError(f"--num-cpus {args.num_cpus:g}: must be more than 0")
    run = api.matrix(args.file, args.out, ray=args.ray, db=args.db, num_cpus=args.num_cpus)
    table = [line for line in run.report.read_text().splitlines() if line.startswith("|")]
    print("\n".join(table))  # the summary: best variant per model, target and device
    print(f"wrote {run.report} ({len(run.results)} builds in {run.seconds:.1f} s, {run.engine})")
    if run.failed:
        print(f"edgeship: error: {len(run.failed)} of {len(run.results)} builds did not pass: "
              + ", ".join(f"{r.model} × {r.target} ({r.state})" for r in run.failed), file=sys.stderr)
        return max(GateFailure.exit_code if r.state == "gates failed" else 1 for r in run.failed)
    return 0


def cmd_lab(args: argparse.Namespace) -> int:
    from edgeship.matrix.lab import start_node

    command = start_node(args.devices_file, args.address, args.device, args.num_cpus)
    print("started: " + " ".join(command))
    return 0


COMMANDS = {"build": cmd_build, "devices": cmd_devices, "report": cmd_report, "bundle": cmd_bundle,
            "cache": cmd_cache, "matrix": cmd_matrix, "lab": cmd_lab, "store": cmd_store, "targets": cmd_targets}


def quiet_libraries() -> None:
    """Silence the deprecation chatter of torch and the backends' toolchains (kept with --debug)."""
    from edgeship.backends.registry import toolchain_dists

    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in ("torch", "torch.utils._pytree", *toolchain_dists()):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if not args.debug:
            quiet_libraries()  # reads the backends' registry: a bad EDGESHIP_BACKENDS_PATH exits 2 here
        with stopping.installed():
            return COMMANDS[args.command](args)
    except GateFailure as e:
        if e.results is not None:
            from edgeship.reports.console import print_results

            print_results(e.results)
        return _fail(e, args)
    except EdgeshipError as e:
        return _fail(e, args)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM or SIGHUP (stopping.Interrupted): 128 + the signal
        outcome = getattr(e, "outcome", "")
        print(f"edgeship: interrupted{'; ' + outcome if outcome else ''}", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except SystemExit as e:  # edgeship's commands return their status: this came from user code they ran
        return _fail(user_code_exit(e, f"edgeship {args.command}"), args)
    except OSError as e:  # the environment: a full disk, a read-only folder, an I/O error (exit 1)
        if isinstance(e, BrokenPipeError) and _reader_gone():
            return 141  # `edgeship targets | head`: the reader left; 128 + SIGPIPE, as the shell's own commands end
        return _fail(os_failure(e), args)


def run() -> None:
    """The ``edgeship`` command: ``main``, then exit without the interpreter's last full garbage
    collection over torch's heap (0.7 s here with torch and a converter loaded; a Ctrl-C waited for it).
    ``gc.freeze`` only exempts the objects alive now from that collection: every file and lock is
    closed by then, and refcounting still frees what it frees."""
    import gc

    code = main()
    gc.freeze()
    sys.exit(code)


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (poll says POLLERR): then stdout is
    pointed at /dev/null, so the interpreter's last flush does not fail again."""
    import os
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        gone = any(event & select.POLLERR for _fd, event in poller.poll(0))
        if gone:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return gone
    except (OSError, ValueError, AttributeError):
        return False


def _fail(e: EdgeshipError, args: argparse.Namespace) -> int:
    if args.debug:
        traceback.print_exc()
    print(f"edgeship: error: {e}", file=sys.stderr)
    return e.exit_code


if __name__ == "__main__":
    run()
