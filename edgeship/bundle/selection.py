"""Which built variants go into a platform's bundle, and why each other one does not.

``passing``: every built variant the platform takes that passed its gates. ``fastest``: of
those, the one with the lowest measured p50 on one device. A list of names: exactly those, even
when a gate failed (the bundle command warns, and the manifest carries the gate results).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from edgeship.bundle.platforms import Platform
from edgeship.errors import BundleError
from edgeship.profile import BundleSettings, Profile, Variant
from edgeship.results import Results, VariantResult


@dataclass
class Selection:
    """The variants chosen for one platform, those left out with the reason, and warnings."""

    platform: Platform
    chosen: list[tuple[VariantResult, Variant]] = field(default_factory=list)
    left_out: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rule: str = ""

    def leave_out(self, name: str, why: str) -> None:
        self.left_out.append({"variant": name, "why": why})


def select_variants(platform: Platform, settings: BundleSettings, profile: Profile, results: Results) -> Selection:
    """The variants of ``results`` to bundle for ``platform`` (BundleError when none qualifies)."""
    sel = Selection(platform)
    named = settings.variants if isinstance(settings.variants, list) else None
    sel.rule = f"named in [bundle].variants: {', '.join(named)}" if named else "every variant that passed its gates"
    pool = [(row, v) for row, v in _candidates(profile, results, sel) if _takes(sel, row, v, named)]
    for name in [n for n in named or [] if n not in {row.name for row in results.variants}]:
        which = (f"a build --variant {', '.join(results.requested_variants)}" if results.requested_variants
                 else "the profile had no such variant then")
        why = f"not in results.json: the build did not make it ({which}); edgeship build --variant {name} makes it"
        sel.leave_out(name, why)
        sel.warnings.append(f"{name} is named but left out: {why}")
    if settings.variants == "fastest":
        pool = _fastest(pool, settings.fastest_on, sel)
    sel.chosen = pool
    if not sel.chosen:
        reasons = "; ".join(f"{x['variant']}: {x['why']}" for x in sel.left_out) or "the results hold no variants"
        raise BundleError(f"no variant goes into the {platform.name} bundle ({sel.rule}): {reasons}")
    return sel


def _candidates(profile: Profile, results: Results, sel: Selection) -> list[tuple[VariantResult, Variant]]:
    by_name = {v.name: v for v in profile.variants}
    out = []
    for row in results.variants:
        if row.is_reference:
            continue
        if row.name not in by_name:
            sel.leave_out(row.name, f"not a variant of profile {profile.name} (results and profile differ)")
        else:
            out.append((row, by_name[row.name]))
    return out


def _takes(sel: Selection, row: VariantResult, variant: Variant, named: list[str] | None) -> bool:
    """Whether ``row`` goes in; records why not when it does not."""
    refused = sel.platform.refuses(variant.backend, variant.options)
    if named is not None and row.name not in named:
        why = "not named in [bundle].variants"
    elif refused:
        why = refused
    elif row.file is None:
        why = f"not built: {row.error or 'no artifact'}"
    elif not row.gates.passed and named is None:
        why = "failed its gates: " + "; ".join(row.gates.failures)
    else:
        if not row.gates.passed:
            sel.warnings.append(f"{row.name} is bundled although it failed its gates: {'; '.join(row.gates.failures)}")
        return True
    sel.leave_out(row.name, why)
    return False


def _fastest(pool: list[tuple[VariantResult, Variant]], device: str | None,
             sel: Selection) -> list[tuple[VariantResult, Variant]]:
    """The one variant with the lowest p50 on ``device`` (default: the first device measured)."""
    measured = [lat.device for row, _ in pool for lat in row.latency if lat.timed]
    device = device or (measured[0] if measured else None)
    timed = [(row.p50_on(device), row, v) for row, v in pool]
    for p50, row, _ in timed:
        if p50 is None:
            sel.leave_out(row.name, row.untimed_why(device))
    timed = [t for t in timed if t[0] is not None]
    if not timed:
        return []
    best = min(timed, key=lambda t: t[0])
    sel.rule = f"the fastest passing variant by p50 on {device}: {best[1].name} ({best[0]:.3f} ms)"
    for p50, row, _ in timed:
        if row is not best[1]:
            sel.leave_out(row.name, f"slower on {device}: p50 {p50:.3f} ms against {best[0]:.3f} ms")
    return [(best[1], best[2])]

