"""aoti (AOTInductor .pt2): lowering, where and for which instruction set a package is compiled, the
runner's refusal of a package on a CPU without a flag it needs, and the package compiled on the device
from an exported program (compile_on = "device")."""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from edgeship.backends.aoti import build as aoti_build
from edgeship.backends.aoti import device as aoti_device
from edgeship.backends.aoti import lower as aoti_lower
from edgeship.backends.aoti.build import vec_isa_flags
from edgeship.backends.aoti.cpu import LEVELS, choose_isa, compile_where
from edgeship.backends.base import LowerRequest
from edgeship.backends.registry import BACKENDS, depends_on_cpu
from edgeship.devices import runner
from edgeship.devices.cpu import cpu_facts
from edgeship.devices.hashing import sha256_file
from edgeship.errors import LoweringError, ProfileError
from edgeship.lowering.capture import Capturer
from edgeship.profile import Variant
from tests import system
from tests.lowering.conftest import sqnr_against_eager
from tests.quantize.test_cpu_choice import EPYC, PI4, XEON


def _metadata(package: Path) -> dict:
    with zipfile.ZipFile(package) as archive:
        name = next(n for n in archive.namelist() if n.endswith("wrapper_metadata.json"))
        return json.loads(archive.read(name))


@pytest.mark.slow
def test_aoti_fp32_matches_eager_and_names_the_cpu_flags_it_was_compiled_for(lower, tiny_model, monkeypatch) -> None:
    artifact, predict = lower("aoti", "export")
    assert artifact.path.suffix == ".pt2" and sqnr_against_eager(tiny_model, predict) >= 60
    details, here = artifact.details, cpu_facts()
    # Frozen (lowered with grad mode on, as a pipeline runs): batch norm folded into prepacked oneDNN
    # convolutions with their ReLU fused, read from the package's generated wrapper; no plain aten call.
    calls = details["kernels"]
    assert calls.get("mkldnn__convolution_pointwise", 0) >= 1 and "convolution" not in calls, calls
    assert calls == aoti_lower.package_calls(artifact.path)
    assert details["isa"] == "native" and details["march"] == "native"  # built for, and run on, this machine
    assert details["compiler"] and details["threads"] == "set at run time"
    assert set(details["cpu_flags_required"]) == set(here["flags"])
    meta = _metadata(artifact.path)
    assert meta["edgeship.cpu_flags"].split(",") == details["cpu_flags_required"]
    # The same package on a CPU without some of those flags: refused before its code is loaded.
    monkeypatch.setattr(runner, "cpu_facts", lambda: EPYC)
    lacking = sorted(set(here["flags"]) - set(EPYC["flags"]))
    if not lacking:
        pytest.skip(system.reason("cpu", "this machine's CPU has no flag the recorded EPYC lacks"))
    with pytest.raises(RuntimeError, match=f"AMD EPYC 7B13\\) lacks {lacking[0]}"):
        runner.open_runner("aoti", str(artifact.path))


def test_aoti_at_the_avx2_level_needs_only_avx2s_flags_and_runs_here(lower, tiny_model) -> None:
    if not set(LEVELS["avx2"][2]) <= set(cpu_facts()["flags"]):
        pytest.skip(system.reason("cpu", "this CPU has no AVX2"))
    artifact, predict = lower("aoti", "export", isa="avx2", threads=1)
    assert artifact.details["march"] == "x86-64-v3" and artifact.details["vec_isa"] == "avx2"
    assert set(artifact.details["cpu_flags_required"]) == set(LEVELS["avx2"][2])
    assert artifact.details["threads"] == 1
    assert sqnr_against_eager(tiny_model, predict) >= 60


def test_isa_auto_compiles_native_where_the_targets_have_every_build_flag_else_the_best_common_level() -> None:
    assert choose_isa("auto", [("box", XEON)], EPYC).level == "native"      # XEON has all of EPYC's flags
    assert choose_isa("auto", [("box", EPYC)], XEON).level == "avx2"        # EPYC has no AVX-512
    assert choose_isa("auto", [("a", XEON), ("b", XEON)], XEON).level == "native"
    unknown = {"model": None, "arch": None, "flags": [], "source": "unknown", "error": "probe failed: timeout"}
    choice = choose_isa("auto", [("box", XEON), ("lost", unknown)], XEON)
    assert choice.level == "generic" and "lost" in choice.why
    assert choose_isa("avx512", [("box", XEON)], XEON).march == "x86-64-v4"


def test_isa_choice_refuses_a_level_a_target_lacks_and_another_architecture_by_name() -> None:
    with pytest.raises(LoweringError, match="avx512f, avx512bw, avx512cd, avx512dq, avx512vl, which device box"):
        choose_isa("avx512", [("box", EPYC)], XEON)
    with pytest.raises(LoweringError, match="device box lacks amx_bf16"):
        choose_isa("native", [("box", EPYC)], XEON)
    with pytest.raises(LoweringError, match="device pi is aarch64, this machine x86_64: AOTInductor does not "
                                            'cross-compile; set options.compile_on = "device"'):
        choose_isa("auto", [("pi", PI4)], XEON)


def test_vector_isa_compiler_flags_map_to_the_cpu_flags_they_need() -> None:
    assert vec_isa_flags("-mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma -mavx512vnni -mamx-tile") == (
        "avx512f", "avx512dq", "avx512vl", "avx512bw", "fma", "avx512_vnni", "amx_tile")


def test_the_runner_checks_a_packages_cpu_needs_or_says_why_it_could_not() -> None:
    needs = {"edgeship.cpu_flags": "avx2,fma", "edgeship.isa": "avx2", "AOTI_MACHINE": "x86_64"}
    assert "checked against this CPU" in aoti_device.check_package_cpu(needs, EPYC)[0]
    unknown = {"model": None, "arch": None, "flags": [], "source": "unknown"}
    assert "were not checked" in aoti_device.check_package_cpu(needs, unknown)[0]
    with pytest.raises(RuntimeError, match="lacks amx_tile and would stop with an illegal instruction"):
        aoti_device.check_package_cpu({**needs, "edgeship.cpu_flags": "avx2,amx_tile"}, EPYC)


def test_aoti_int8_is_refused_at_plan_time_unfrozen_or_compiled_on_the_device(tmp_path: Path) -> None:
    from edgeship.profile import load_profile

    for options, said in (("freezing = false", "needs options.freezing = true"),
                          ('compile_on = "device"', 'compile_on = "device" is not supported for it')):
        (tmp_path / "p.toml").write_text('[[variants]]\nname = "q"\nbackend = "aoti"\nprecision = "int8"\n'
                                         f"options = {{ {options} }}\n")
        with pytest.raises(ProfileError, match=re.escape(said)):
            load_profile(tmp_path / "p.toml")
    (tmp_path / "p.toml").write_text('[[variants]]\nname = "q"\nbackend = "aoti"\nprecision = "int8"\n')
    assert load_profile(tmp_path / "p.toml").variants[0].precision == "int8"


def _lower_for_device(model, dest: Path, **options):
    """The tiny model lowered with compile_on = "device" (nothing compiled, nothing loaded)."""
    options = {"compile_on": "device", **options}
    backend = BACKENDS["aoti"]
    captured = Capturer(model).get("export", False)
    variant = Variant(name="on-device", backend="aoti", options=options)
    return backend.lower(LowerRequest(captured, variant, backend.parse_options(options), dest))


def test_aoti_on_device_writes_the_exported_program_which_the_runner_compiles_once_and_reuses(
        tiny_model, tmp_path) -> None:
    artifact = _lower_for_device(tiny_model, tmp_path / "v" / "model.pt2")
    assert not aoti_build.is_package(artifact.path) and artifact.details["compile_on"] == "device"
    assert aoti_build.read_settings(artifact.path)["isa"] == "native" == artifact.details["isa"]
    assert "compiles it for its own CPU at its first run" in " ".join(artifact.notes)

    first = runner.open_runner("aoti", str(artifact.path), threads=1)
    package = tmp_path / "v" / "model.aoti.pt2"
    assert first.notes[0].startswith("package compiled on this device in ") and aoti_build.is_package(package)
    assert sqnr_against_eager(tiny_model, first.infer) >= 60
    metadata = aoti_device.aoti_metadata(package)
    assert metadata["edgeship.source_sha256"] == sha256_file(artifact.path)
    assert set(metadata["edgeship.cpu_flags"].split(",")) >= set(LEVELS["generic"][2])  # -march=native: this CPU's

    second = runner.open_runner("aoti", str(artifact.path), threads=1)
    assert second.notes[0] == "package reused: model.aoti.pt2, compiled on this device from this artifact"
    assert sqnr_against_eager(tiny_model, second.infer) >= 60

    changed = _lower_for_device(tiny_model, artifact.path, threads=1)  # other settings inside: another artifact
    stale = aoti_device.stale_package(str(package), sha256_file(changed.path))
    assert stale == "the one there was made from another artifact"


def test_aoti_on_device_fails_the_job_saying_to_install_a_compiler_when_there_is_none(tiny_model, tmp_path) -> None:
    from torch._inductor import config

    artifact = _lower_for_device(tiny_model, tmp_path / "model.pt2")
    said = re.escape("AOTInductor needs a C++ compiler on the device: apt-get install g++ (/nonexistent/g++ not found")
    with config.patch({"cpp.cxx": (None, "/nonexistent/g++")}), pytest.raises(RuntimeError, match=said):
        runner.open_runner("aoti", str(artifact.path))
    assert not (tmp_path / "model.aoti.pt2").exists()


def test_compile_on_auto_compiles_on_the_device_for_a_target_of_another_architecture() -> None:
    where, why = compile_where("auto", [("box", EPYC), ("pi", PI4)], XEON)
    assert where == "device" and why == "device pi is aarch64, this machine x86_64: AOTInductor does not cross-compile"
    assert compile_where("auto", [("box", EPYC)], XEON)[0] == "build"
    assert compile_where("build", [("pi", PI4)], XEON)[0] == "build"  # then choose_isa refuses it, by name
    choice = choose_isa("auto", [("pi", PI4)], XEON, "device")
    assert choice.level == "native" and choice.march is None and choice.flags == ()
    assert choose_isa("avx2", [("box", EPYC)], XEON, "device").march == "x86-64-v3"
    with pytest.raises(LoweringError, match='options.isa = "avx2" is an x86 level; device pi is aarch64'):
        choose_isa("avx2", [("pi", PI4)], XEON, "device")
    # The target CPUs are read (probed) only when lowering needs them: not for a device's own native code.
    aoti = lambda **options: Variant(name="a", backend="aoti", options=options)  # noqa: E731
    assert depends_on_cpu(aoti()) and depends_on_cpu(aoti(compile_on="device", isa="avx2"))
    assert not depends_on_cpu(aoti(compile_on="device"))


def test_stage_key_of_an_aoti_artifact_compiled_on_the_device_does_not_depend_on_the_build_cpu(
        tmp_path, tiny_project, monkeypatch) -> None:
    from edgeship.devices import cpu as device_cpu
    from edgeship.pipeline.plan import BuildRequest, make_plan
    from edgeship.pipeline.stagecache import StageKeys
    from tests.conftest import write_profile

    profile = write_profile(tmp_path, '[[variants]]\nname = "a"\nbackend = "aoti"\n')
    plan = make_plan(BuildRequest(target=str(profile), model=str(tiny_project / "model.toml")))
    (variant,) = plan.profile.variants
    keys = {}
    for name, build in (("epyc", EPYC), ("xeon", XEON)):
        monkeypatch.setattr(device_cpu, "cpu_facts", lambda build=build: build)
        keys[name] = (StageKeys(plan, [("pi", PI4)]).artifact(variant)["cpu"]["aoti_isa"],
                      StageKeys(plan, [("box", EPYC)]).artifact(variant)["cpu"]["aoti_isa"])
    assert keys["epyc"][0] == keys["xeon"][0] == {"compile_on": "device", "level": "native", "flags": []}
    assert keys["epyc"][1]["compile_on"] == "build" and keys["epyc"][1] != keys["xeon"][1]  # native code of each
    assert "compiler" in keys["epyc"][1]


def test_aoti_on_device_runs_the_saved_exported_program_at_the_spec_sizes_without_compiling(tmp_path) -> None:
    from tests.lowering.test_dynamic_shapes import CONV, loaded

    artifact = _lower_for_device(loaded(CONV), tmp_path / "model.pt2")
    assert any(n.startswith("the exported program ran at the spec's sizes") for n in artifact.notes), artifact.notes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt2"]
