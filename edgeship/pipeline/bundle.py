"""The last stages of a build: the reports, and the app bundles the profile asks for.

Both run after the build's results are final, also when a gate failed (the build then still exits
3), and write into the folder given: the staging folder, which is published as a whole afterwards
(or, when an unchanged build rewrites a missing report, the build folder itself). A bundle that
cannot be made (no variant qualifies) is reported as a warning line: the build's own outcome is
already decided by its gates.
"""
from __future__ import annotations

from pathlib import Path

from edgeship.pipeline.plan import Plan
from edgeship.progress import Progress
from edgeship.results import Results


def report_and_bundle(plan: Plan, results: Results, progress: Progress, folder: Path | None = None) -> None:
    """Write report.md, report.html and results.csv, then one bundle zip per ``[bundle]`` platform,
    into ``folder`` (default: the build folder); the bundles take the artifacts from there too.

    When a results store is in use, the report also compares the build with the earlier builds of
    the same model and target there (regressions flagged, not failed on); a store that cannot be
    read then gives a report without that comparison, and a warning.
    """
    from edgeship.errors import StoreError
    from edgeship.reports import Build, Report, compare, store_rows, write_reports

    folder = Path(folder or plan.out_dir)
    with progress.step("report") as status:
        build = Build(plan.profile.name, results, str(plan.out_dir / "results.json"))
        store = getattr(plan, "store", None)
        comparison, unread = None, ""
        if store is not None:
            try:
                comparison = compare(*store_rows([build], store.url, results.model.name, results.target))
            except StoreError as e:
                unread = f"; no comparison with earlier builds: {e}"
        paths = write_reports(Report.of([build]), folder, comparison)
        regressions = len(comparison.regressions) if comparison else 0
        status.update(result=", ".join(p.name for p in paths) + (f"; {regressions} regression(s) against the "
                                                                  "previous build" if regressions else "") + unread,
                      warn="1" if regressions or unread else "")
    if plan.profile.bundle is not None:
        bundle_all(plan, results, progress, folder)


def bundle_all(plan: Plan, results: Results, progress: Progress, folder: Path | None = None) -> None:
    from edgeship.bundle import PLATFORMS, BundleInputs, make_bundle
    from edgeship.errors import BundleError

    inputs = BundleInputs(plan.profile, plan.spec, results, Path(folder or plan.out_dir), plan.profile.bundle)
    for name in plan.profile.bundle.platforms:
        with progress.step(f"bundle {name}") as status:
            try:
                bundle = make_bundle(PLATFORMS[name], inputs, unpacked=True)
            except BundleError as e:
                status.update(warn="1", result=f"no bundle: {e}")
                continue
            chosen = ", ".join(row.name for row, _ in bundle.selection.chosen)
            status.update(result=f"{plan.out_dir / bundle.path.name} ({chosen})",
                          warn="1" if bundle.selection.warnings else "")
