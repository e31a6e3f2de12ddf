"""A partial build (``build --variant NAME``): only the variants asked for are lowered and measured,
with the eager reference; the rows of the profile's other variants are kept from the build already in
the folder while they still hold, and only then.

A row of a variant not asked for is kept (its artifact file stays, its row goes into the new
results.json unchanged but for a note) when all of these hold:

1. the folder's results.json is one this machine's edgeship wrote (its signed record: the rule
   every reuse of a folder's results follows) and has a row for the variant;
2. the stage cache holds the variant's artifact under its key as this build computes it (the model
   and its weights, the variant's settings, the calibration data, the toolchain, edgeship's source),
   with the sha256 of that row: the file is exactly what building the variant now would make. It is
   restored from the cache (checked), not taken from the folder;
3. every measurement the row needs on this build's devices is in that results.json and still holds
   (``schedule.reusable``: the same file, evaluation inputs, float outputs and labels, latency settings).

Otherwise the variant is left out of this build, as in a build whose profile lacked it: its earlier
folder goes at publish (``output.publish``: only edgeship's own files, and it says so), because a file
results.json does not describe, or describes from another model, is what the build folder never holds.
So results.json stays true to every file in the folder, and everything that reads it (the unchanged
re-build check, ``--resume``, reports, bundles, the results store, whose rows are keyed by their
``measured_at``) reads it as it reads any build. ``requested_variants`` in results.json names the
variants asked for; only their rows (and the eager one) decide the exit status (``gates``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgeship.cache import Cache, default_cache
from edgeship.devices import Job
from edgeship.fsutil import remove_path
from edgeship.pipeline.lower import Lowered, restored
from edgeship.pipeline.output import RESULTS
from edgeship.pipeline.plan import Plan
from edgeship.pipeline.schedule import ReuseKey, Task, plan_tasks, reusable
from edgeship.pipeline.stagecache import StageKeys, read_results, restore_artifact
from edgeship.profile import Variant
from edgeship.results import Results, VariantResult

AGAIN = "build it with --variant {name}, or without --variant"


@dataclass
class EarlierBuild:
    """The folder's earlier build as a build --variant sees it: its results (None: nothing to keep from),
    the variants asked for, and each variant of the earlier build not kept, with the reason."""

    results: Results | None
    requested: list[str]
    dropped: dict[str, str] = field(default_factory=dict)
    say: Callable[[str], None] = print

    def candidates(self, plan: Plan) -> list[Variant]:
        """The variants not asked for that the earlier build has a row of, in the profile's order."""
        rows = {r.name for r in self.results.variants if not r.is_reference} if self.results else set()
        return [v for v in plan.profile.variants if not plan.builds(v.name) and v.name in rows]

    def artifact(self, variant: Variant, keys: StageKeys, cache: Cache, staged: Path) -> Lowered | None:
        """The variant's artifact from the stage cache into the staging folder, when it is the earlier
        row's (rule 2); None, the variant dropped, otherwise."""
        row = self.results.variant(variant.name)
        if row.file is None or row.sha256 is None:
            return self.drop(variant.name, f"it has no artifact there ({row.error or 'not built'})")
        record = restore_artifact(cache, keys.artifact(variant), staged / variant.name)
        if record is None or record["sha256"] != row.sha256:
            remove_path(staged / variant.name)
            return self.drop(variant.name, "its artifact there is not the one this build would make (the model, the "
                                           "variant's settings, the data, the toolchain or edgeship changed, or the "
                                           "stage cache no longer holds it)")
        return restored(variant, record, staged / variant.name)

    def measurements(self, jobs: list[tuple[VariantResult, Job, str | None]], plan: Plan, current: ReuseKey,
                     work: Path) -> list[Task]:
        """The kept rows' tasks, every one reused from the earlier results (rule 3); a row with a
        measurement that does not hold is dropped (see ``discard``)."""
        tasks, _ = plan_tasks(jobs, plan.devices, work, self.results, current)
        for task in tasks:
            if task.reused is None and task.row.name not in self.dropped:
                _, why = reusable(self.results, task.row, task.device.name, task.device.planned(task.job), current)
                self.drop(task.row.name, f"none of its measurements on {task.device.name} there holds now ({why})")
        return [t for t in tasks if t.row.name not in self.dropped]

    def discard(self, rows: list[VariantResult], lowered: list[Lowered], staged: Path) -> None:
        """Take the dropped variants' rows, lowering outcomes and staged folders out of the build; note
        on each kept row where it comes from."""
        rows[:] = [r for r in rows if r.name not in self.dropped]
        lowered[:] = [item for item in lowered if item.variant.name not in self.dropped]
        for name in self.dropped:
            remove_path(staged / name)
        for row in rows:
            if not row.is_reference and row.name not in self.requested:
                row.notes.append(f"kept from the build of {self.results.created} in this folder: not lowered or "
                                 f"measured by this build (build --variant {', '.join(self.requested)}); its "
                                 "artifact is the one this build would make and its measurements still hold")

    def left_out(self, plan: Plan, rows: list[VariantResult]) -> list[str]:
        """results.json's build-level notes: each variant of the profile this build has no row of, and why."""
        have = {r.name for r in rows}
        default = "not in the earlier build in this folder" if self.results else "no earlier build to keep it from"
        return [f"variant {v.name} is not in this build (build --variant {', '.join(self.requested)}): "
                f"{self.dropped.get(v.name, default)}" for v in plan.profile.variants if v.name not in have]

    def drop(self, name: str, why: str) -> None:
        self.dropped[name] = why
        self.say(f"{name}: not kept from the earlier build in this folder: {why}; {AGAIN.format(name=name)}")


def earlier_build(plan: Plan, say: Callable[[str], None]) -> EarlierBuild | None:
    """For a partial build, the folder's earlier build as far as it may be kept from (rule 1); None
    for a build of every variant."""
    if plan.requested is None:
        return None
    path = plan.out_dir / RESULTS
    written = read_results(default_cache(), path)
    if written is not None and not written.vouched:
        say(f"{path} is not a results.json this machine's edgeship wrote: none of its rows is kept; the variants "
            "not asked for are left out of this build")
    found = EarlierBuild(written.results if written is not None and written.vouched else None, plan.requested, say=say)
    others = [v.name for v in plan.profile.variants if not plan.builds(v.name)]
    missing = [n for n in others if n not in {v.name for v in found.candidates(plan)}]
    if missing and written is None:
        say(f"not built (build --variant): {', '.join(missing)}; {plan.out_dir} holds no earlier build to keep "
            "them from")
    elif missing and found.results is not None:
        say(f"not built (build --variant) and not in the earlier build in {plan.out_dir}: {', '.join(missing)}")
    return found
