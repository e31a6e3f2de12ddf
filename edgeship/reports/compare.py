"""Comparisons over measurement rows (the results store's rows): the same artifact on several
devices, and the same model across builds, with regressions flagged.

Rows come from the results store (``--db URL``) and from the results files given, which are
turned into the same rows by recording them into an in-memory store, so both are compared
alike. A regression is a build whose p50 on a device is slower than the previous build's by more
than a threshold, or whose top-1 on that device is lower by more than a tolerance. Only new
measurements are compared: a row a later build reused (``build --resume``: same ``measured_at``
and artifact) is the earlier measurement, not a new one. Rows measured under an emulator
(``emulated``) enter no latency comparison: their times are the emulator's.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from edgeship.reports.rows import Build

Row = dict[str, Any]


@dataclass
class DeviceComparison:
    """One artifact (by sha256) measured on several devices: the latest p50 on each."""

    model: str
    variant: str
    backend: str
    precision: str
    sha256: str
    p50: dict[str, float]

    @property
    def fastest(self) -> str:
        return min(self.p50, key=self.p50.__getitem__)


@dataclass
class Change:
    """One (model, target, variant, device) in its last two builds."""

    key: tuple[str, str, str, str]
    before: Row
    after: Row
    builds: int
    regressions: list[str] = field(default_factory=list)

    @property
    def p50_before(self) -> float | None:
        """The earlier build's p50; None when not measured or emulated (an emulator's time is no speed)."""
        return None if self.before.get("emulated") else self.before.get("p50_ms")

    @property
    def p50_after(self) -> float | None:
        return None if self.after.get("emulated") else self.after.get("p50_ms")

    @property
    def p50_change_pct(self) -> float | None:
        a, b = self.p50_after, self.p50_before
        return 100 * (a / b - 1) if a is not None and b else None

    @property
    def top1_change_pts(self) -> float | None:
        a, b = self.after.get("top1"), self.before.get("top1")
        return 100 * (a - b) if a is not None and b is not None else None


@dataclass
class Comparison:
    """Everything compared, and the thresholds used."""

    devices: list[DeviceComparison]
    changes: list[Change]
    threshold_pct: float
    top1_tolerance: float
    sources: list[str]

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regressions]


def store_rows(builds: list[Build], db: str | None, model: str | None = None, target: str | None = None,
               notes: list[str] | None = None) -> tuple[list[Row], list[str]]:
    """Rows of the given builds and, with ``db``, of the results store (read as it is: never migrated);
    oldest build first. ``notes`` gets what a reader should know about the store (an older revision)."""
    from edgeship.store import ResultsStore

    memory = ResultsStore("sqlite://")
    for b in builds:
        memory.record(b.results, build_id=b.label)
    rows = memory.rows(model=model, target=target)
    sources = [b.source for b in builds]
    if db is not None:
        store = ResultsStore(db, read_only=True)  # a report never migrates or creates a store
        given = {(b.results.created, b.results.target, b.results.model.name) for b in builds}
        rows += [r for r in store.rows(model=model, target=target)
                 if (r["created"], r["target"], r["model"]) not in given]
        sources.append(store.display_url)  # never the password
        if notes is not None and store.behind:
            notes.append(store.behind)
    return sorted(rows, key=lambda r: r["created"]), sources


def compare(rows: list[Row], sources: list[str], threshold_pct: float = 10.0,
            top1_tolerance: float = 0.0) -> Comparison:
    """Compare ``rows`` (oldest first) across devices and across builds."""
    return Comparison(across_devices(rows), across_builds(rows, threshold_pct, top1_tolerance),
                      threshold_pct, top1_tolerance, sources)


def across_devices(rows: list[Row]) -> list[DeviceComparison]:
    """Artifacts measured on two or more devices, with the latest p50 per device."""
    by_sha: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r["artifact_sha256"] and r["device"] and r["p50_ms"] is not None and not r.get("emulated"):
            by_sha[r["artifact_sha256"]].append(r)
    out = []
    for sha, group in by_sha.items():
        p50 = {r["device"]: r["p50_ms"] for r in group}  # later rows overwrite: the latest per device
        if len(p50) > 1:
            last = group[-1]
            out.append(DeviceComparison(last["model"], last["variant"], last["backend"], last["precision"], sha, p50))
    return out


def across_builds(rows: list[Row], threshold_pct: float, top1_tolerance: float) -> list[Change]:
    """The last two measurements of every (model, target, variant, device) measured in two or more
    builds, in the order they were measured."""
    groups: dict[tuple[str, str, str, str], dict[str, Row]] = defaultdict(dict)
    for r in rows:
        if r["device"]:
            groups[(r["model"], r["target"], r["variant"], r["device"])][r["build_id"]] = r
    out = []
    for key, by_build in groups.items():
        measured = measurements(list(by_build.values()))
        if len(measured) < 2:
            continue
        *_, before, after = measured
        change = Change(key, before, after, len(measured))
        change.regressions = regressions(change, threshold_pct, top1_tolerance)
        out.append(change)
    return out


def measurements(rows: list[Row]) -> list[Row]:
    """One row per measurement, oldest measured first: a row with the ``measured_at`` and artifact
    of an earlier one was reused from it (the earlier build's row is kept)."""
    seen: dict[tuple[object, ...], Row] = {}
    for r in rows:
        stamp = r.get("measured_at")
        seen.setdefault((stamp, r.get("artifact_sha256")) if stamp else ("build", r["build_id"]), r)
    return sorted(seen.values(), key=lambda r: r.get("measured_at") or r["created"])


def regressions(change: Change, threshold_pct: float, top1_tolerance: float) -> list[str]:
    """What got worse from the previous build to the last, beyond the thresholds."""
    found = []
    p50 = change.p50_change_pct
    if p50 is not None and p50 > threshold_pct:
        cv = [change.before.get("cv"), change.after.get("cv")]
        spread = f"; cv {cv[0]:.2f} -> {cv[1]:.2f}" if None not in cv else ""  # how steady each timing was
        found.append(f"p50 {change.p50_before:.3f} -> {change.p50_after:.3f} ms "
                     f"({p50:+.1f}%, threshold {threshold_pct:g}%{spread})")
    top1 = change.top1_change_pts
    if top1 is not None and top1 < -top1_tolerance:
        found.append(f"top-1 {100 * change.before['top1']:.2f}% -> {100 * change.after['top1']:.2f}% "
                     f"({top1:+.2f} points, tolerance {top1_tolerance:g})")
    return found


def describe(change: Change) -> str:
    """One line naming a regression: model, target, variant, device, builds and what got worse."""
    model, target, variant, device = change.key
    return (f"{model}/{target} {variant} on {device} (build {change.before['build_id']} -> "
            f"{change.after['build_id']}): {'; '.join(change.regressions)}")
