"""The last stages of a build: the reports, and the app bundles the profile asks for.

Both run after results.json is written, also when a gate failed (the build then still exits 3).
A bundle that cannot be made (no variant qualifies) is reported as a warning line: the build's
own outcome is already decided by its gates.
"""
from __future__ import annotations

from edgeship.pipeline.plan import Plan
from edgeship.progress import Progress
from edgeship.results import Results


def report_and_bundle(plan: Plan, results: Results, progress: Progress) -> None:
    """Write report.md, report.html and results.csv, then one bundle zip per ``[bundle]`` platform.

    When the build was recorded in a results store, the report also compares it with the earlier
    builds of the same model and target there (regressions flagged, not failed on).
    """
    from edgeship.reports import Build, Report, compare, store_rows, write_reports

    with progress.step("report") as status:
        build = Build(plan.profile.name, results, str(plan.out_dir / "results.json"))
        store = getattr(plan, "store", None)
        comparison = None
        if store is not None:
            comparison = compare(*store_rows([build], store.url, results.model.name, results.target))
        paths = write_reports(Report.of([build]), plan.out_dir, comparison)
        regressions = len(comparison.regressions) if comparison else 0
        status.update(result=", ".join(p.name for p in paths) + (f"; {regressions} regression(s) against the "
                                                                  "previous build" if regressions else ""),
                      warn="1" if regressions else "")
    if plan.profile.bundle is not None:
        bundle_all(plan, results, progress)


def bundle_all(plan: Plan, results: Results, progress: Progress) -> None:
    from edgeship.bundle import PLATFORMS, BundleInputs, make_bundle
    from edgeship.errors import BundleError

    inputs = BundleInputs(plan.profile, plan.spec, results, plan.out_dir, plan.profile.bundle)
    for name in plan.profile.bundle.platforms:
        with progress.step(f"bundle {name}") as status:
            try:
                bundle = make_bundle(PLATFORMS[name], inputs)
            except BundleError as e:
                status.update(warn="1", result=f"no bundle: {e}")
                continue
            chosen = ", ".join(row.name for row, _ in bundle.selection.chosen)
            status.update(result=f"{bundle.path} ({chosen})", warn="1" if bundle.selection.warnings else "")
