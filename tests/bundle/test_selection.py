"""Which variants go into a bundle: passing ones, the fastest one, or the ones named."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.bundle.platforms import PLATFORMS
from edgeship.bundle.selection import select_variants
from edgeship.errors import BundleError
from edgeship.profile import BundleSettings, load_profile
from edgeship.results import Results


@pytest.fixture(scope="module")
def build(two_device_build: Path) -> tuple:
    return load_profile(two_device_build.parent / "twodev.toml"), Results.read(two_device_build / "results.json")


def chosen(sel) -> list[str]:
    return [row.name for row, _ in sel.chosen]


def test_select_variants_passing_takes_every_built_variant_that_passed(build) -> None:
    profile, results = build
    sel = select_variants(PLATFORMS["android"], BundleSettings(platforms=["android"]), profile, results)
    assert chosen(sel) == ["executorch-fp32", "mobile-fp32"] and sel.warnings == []


def test_select_variants_leaves_out_a_variant_that_failed_its_gates_unless_named(build) -> None:
    profile, results = build
    results = results.model_copy(deep=True)
    results.variant("mobile-fp32").gates.passed = False
    results.variant("mobile-fp32").gates.failures = ["sqnr_db 12 < 60"]
    passing = select_variants(PLATFORMS["android"], BundleSettings(platforms=["android"]), profile, results)
    assert chosen(passing) == ["executorch-fp32"]
    assert {"variant": "mobile-fp32", "why": "failed its gates: sqnr_db 12 < 60"} in passing.left_out
    named = select_variants(PLATFORMS["android"], BundleSettings(platforms=["android"], variants=["mobile-fp32"]),
                   profile, results)
    assert chosen(named) == ["mobile-fp32"]
    assert named.warnings == ["mobile-fp32 is bundled although it failed its gates: sqnr_db 12 < 60"]


def test_select_variants_fastest_on_a_named_device(build) -> None:
    profile, results = build
    settings = BundleSettings(platforms=["jetson"], variants="fastest", fastest_on="cpu-b")
    sel = select_variants(PLATFORMS["jetson"], settings, profile, results)
    p50 = {name: next(lat.p50_ms for lat in results.variant(name).latency if lat.device == "cpu-b")
           for name in ("onnx-fp32", "tensorrt-fp16")}
    assert chosen(sel) == [min(p50, key=p50.get)] and "on cpu-b" in sel.rule


def test_select_variants_with_nothing_to_bundle_names_every_reason(build) -> None:
    profile, results = build
    with pytest.raises(BundleError, match="no variant goes into the ios bundle .*mobile-fp32: ios bundles take"):
        select_variants(PLATFORMS["ios"], BundleSettings(platforms=["ios"], variants=["mobile-fp32"]), profile, results)


def test_select_variants_named_variant_a_partial_build_did_not_make_is_left_out_with_a_warning(tmp_path) -> None:
    """After ``build --variant a`` into a new folder, results.json has no row of b: naming b says so."""
    from edgeship.results import ModelInfo, VariantResult
    from tests.conftest import write_profile

    mobile = '\n[[variants]]\nname = "{}"\nbackend = "pytorch-mobile"\n'
    profile = load_profile(write_profile(tmp_path, mobile.format("a") + mobile.format("b")))
    rows = [VariantResult(name="eager", backend="eager", precision="fp32"),
            VariantResult(name="a", backend="pytorch-mobile", precision="fp32", file="a/model.ptl", sha256="0" * 64)]
    results = Results(target=profile.name, created="2026-01-01T00:00:00Z", toolchain={}, variants=rows,
                      model=ModelInfo(name="m", entry="m:b", inputs=[], params=1), requested_variants=["a"])
    sel = select_variants(PLATFORMS["android"], BundleSettings(platforms=["android"], variants=["a", "b"]), profile,
                          results)
    assert chosen(sel) == ["a"]
    why = "not in results.json: the build did not make it (a build --variant a); edgeship build --variant b makes it"
    assert {"variant": "b", "why": why} in sel.left_out and sel.warnings == [f"b is named but left out: {why}"]
