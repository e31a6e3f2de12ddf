"""The end of a build: reports, bundles and results.json written (staged), published into the build
folder as a whole, then recorded in the results store; and the unchanged path's repairs.

The store comes last, after the files: when it cannot take the build (a locked SQLite file, a
server away), the folder is already whole, the build is kept in ``.edgeship-unrecorded.json``, and
the next build into the folder (unchanged or not) records it first.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from edgeship import stopping
from edgeship.cache import default_cache
from edgeship.errors import StoreError
from edgeship.fsutil import atomic_write_bytes, remove_path
from edgeship.pipeline.bundle import report_and_bundle
from edgeship.pipeline.output import INCOMPLETE, RESULTS, UNRECORDED, BuildFiles, BuildFolder, Pending
from edgeship.pipeline.plan import Plan
from edgeship.pipeline.stagecache import vouch_results
from edgeship.progress import Progress
from edgeship.results import Results


@dataclass
class Unchanged:
    """A previous build this one is identical to: its results, its manifest, and the reports or
    bundles in the folder that are not that build's (written again from its results)."""

    results: Results
    doc: BuildFiles
    stale: list[str]


def publish_build(plan: Plan, folder: BuildFolder, results: Results, progress: Progress) -> Pending | None:
    """Reports, bundles and results.json into the staging folder, then all of it into the build folder;
    the build as it is to be recorded in the results store (None without a store)."""
    report_and_bundle(plan, results, progress, folder.staged)
    data = results.dump().encode("utf-8")
    atomic_write_bytes(folder.staged / RESULTS, data)
    vouch_results(default_cache(), data)  # the bytes written, not the file read back: what a later build may reuse
    pending = None
    if plan.store is not None:
        pending = folder.stage_pending(uuid.uuid4().hex[:16], plan.store.display_url, results)
    with progress.step(f"publish into {plan.out_dir}") as status, stopping.deferred():  # never half-published
        messages = folder.publish(results.build_key, [v.name for v in results.variants if not v.is_reference])
        status["result"] = f"wrote {plan.out_dir / RESULTS}"
    for line in messages:
        progress.info(line)
    return pending


def record_build(plan: Plan, folder: BuildFolder, pending: Pending | None, progress: Progress) -> None:
    """Record the published build in the results store (StoreError, exit 2, when it cannot: the files
    are whole, and the next build into the folder records it)."""
    _record(plan, folder, pending, progress,
            f"The files in {plan.out_dir} are written and consistent; the next build into it records this build "
            f"(kept in {folder.root / UNRECORDED})")


def record_pending(plan: Plan, folder: BuildFolder, progress: Progress) -> None:
    """Record a build that an earlier run wrote but the results store could not take then."""
    pending = folder.pending()
    if pending is None and (folder.root / UNRECORDED).exists():
        progress.info(f"{folder.root / UNRECORDED} cannot be read, or was not written by this machine's edgeship "
                      "(changed since, or its key is another): the build it kept is not recorded in the results "
                      "database (remove the file to stop this message)")
    if pending is not None:
        _record(plan, folder, pending, progress,
                f"It is the build of {pending.results.created} in {plan.out_dir}, written but not yet recorded "
                f"(kept in {folder.root / UNRECORDED}); nothing was built: run again when the database can be written",
                f" of {pending.results.created} (the results database could not take it then: {pending.database})")


def _record(plan: Plan, folder: BuildFolder, pending: Pending | None, progress: Progress, on_failure: str,
            described: str = "") -> None:
    """A pending build into the store, then its file removed; ``on_failure`` completes the StoreError's
    message."""
    if plan.store is None or pending is None:
        return
    try:
        build_id = plan.store.record(pending.results, build_id=pending.build_id, matrix=plan.request.matrix)
    except StoreError as e:
        raise StoreError(f"{e}. {on_failure}") from None
    folder.clear_pending()
    progress.info(f"recorded build {build_id}{described} in {plan.store.display_url}")


def reuse_output(plan: Plan, folder: BuildFolder, unchanged: Unchanged, progress: Progress) -> None:
    """An unchanged build's folder made whole again: reports and bundles that are not its own written
    again from its results.json (nothing lowered or measured), then its manifest."""
    if (folder.root / INCOMPLETE).exists() and not unchanged.stale:
        progress.info(f"a build into {plan.out_dir} was stopped before it finished; the files there are whole "
                      f"(the build of {unchanged.results.created}) and check out")
    if unchanged.stale:
        progress.info(f"{', '.join(unchanged.stale)} in {plan.out_dir}: missing or not this build's; writing "
                      "them again from results.json")
        report_and_bundle(plan, unchanged.results, progress, plan.out_dir)
    if unchanged.stale or (folder.root / INCOMPLETE).exists():
        folder.settle(unchanged.doc)
    remove_path(folder.staged)  # what a build killed while publishing left there
