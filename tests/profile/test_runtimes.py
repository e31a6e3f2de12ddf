"""A profile naming a backend whose runtime is not installed stops before any work, with the pip line
that installs every missing extra (what "installed" means is patched here; tests/test_packaging.py
makes a real venv with only the onnx extra)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import edgeship.profile.runtimes as runtimes
from edgeship.backends.registry import SPECS
from edgeship.cli import main
from edgeship.errors import MissingRuntimeError
from edgeship.profile import load_profile
from tests.conftest import write_profile

INSTALL_PAGE = Path(__file__).resolve().parents[2] / "docs" / "install.md"
ONNX_ONLY = """
[[variants]]
name = "ort"
backend = "onnx"
"""


def without(monkeypatch: pytest.MonkeyPatch, *dists: str) -> None:
    """This machine as if ``dists`` were not installed (everything else is)."""
    monkeypatch.setattr(runtimes, "installed", lambda dist: dist not in dists)


def test_require_runtimes_names_each_variant_and_ends_with_one_pip_line(monkeypatch) -> None:
    without(monkeypatch, "executorch", "openvino", "nncf")
    with pytest.raises(MissingRuntimeError) as e:
        runtimes.require_runtimes(load_profile("host"))
    lines = str(e.value).splitlines()
    assert lines[-1] == 'pip install "edgeship[executorch,openvino]"'
    assert "  executorch-xnnpack-fp32: backend executorch needs executorch (the executorch extra)" in lines
    assert "  openvino-int8: backend openvino needs openvino, nncf (the openvino extra)" in lines
    assert "onnx-fp32" not in str(e.value) and "mobile-fp32" not in str(e.value)
    assert e.value.exit_code == 2


def test_require_runtimes_passes_when_the_profile_needs_only_what_is_installed(monkeypatch) -> None:
    without(monkeypatch, "executorch", "openvino", "nncf", "coremltools")
    runtimes.require_runtimes(load_profile("linux"))  # aoti, torchscript and onnx: torch and the onnx extra


def test_require_runtimes_checks_only_the_variants_built_when_some_are_named(monkeypatch) -> None:
    without(monkeypatch, "executorch", "openvino", "nncf")
    runtimes.require_runtimes(load_profile("host"), ["mobile-fp32", "onnx-int8"])  # build --variant
    with pytest.raises(MissingRuntimeError) as e:
        runtimes.require_runtimes(load_profile("host"), ["onnx-fp32", "openvino-int8"])
    assert str(e.value).splitlines()[-1] == 'pip install "edgeship[openvino]"' and "executorch" not in str(e.value)


def test_require_runtimes_lists_distributions_of_a_backend_without_an_extra(monkeypatch) -> None:
    without(monkeypatch, "coremltools", "onnxruntime")
    monkeypatch.setattr(SPECS["coreml"], "extra", None)  # as a backend package from EDGESHIP_BACKENDS_PATH may be
    with pytest.raises(MissingRuntimeError) as e:
        runtimes.require_runtimes(load_profile("ios"))
    assert str(e.value).splitlines()[-1] == "pip install coremltools"
    without(monkeypatch, "onnxruntime", "nncf")
    with pytest.raises(MissingRuntimeError) as e:
        runtimes.require_runtimes(load_profile("x86"))  # openvino and onnx: one extra each, one line
    assert str(e.value).splitlines()[-1] == 'pip install "edgeship[onnx,openvino]"'


def test_installed_reads_distribution_metadata_without_importing() -> None:
    import sys

    assert runtimes.installed("numpy") and not runtimes.installed("edgeship-no-such-distribution")
    assert runtimes.installed("ml-dtypes") == runtimes.installed("ml_dtypes")  # names are normalized
    assert "edgeship-no-such-distribution" not in sys.modules


def test_cli_build_with_a_missing_runtime_exits_2_before_any_work(monkeypatch, capsys, tiny_project: Path,
                                                                  tmp_path: Path) -> None:
    without(monkeypatch, "onnxruntime")
    marker = tmp_path / "imported"
    (tiny_project / "sentinel.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef build(): pass\n")
    spec = tiny_project / "model.toml"
    spec.write_text(spec.read_text().replace("tinynet:build", "sentinel:build"))
    profile, out = write_profile(tmp_path, ONNX_ONLY), tmp_path / "out"
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.rstrip().splitlines()[-1] == 'pip install "edgeship[onnx]"'
    assert "ort: backend onnx needs onnxruntime (the onnx extra)" in err and str(profile) in err
    assert not marker.exists() and not out.exists()


def test_install_page_shows_the_refusal_as_a_build_prints_it(monkeypatch) -> None:
    """docs/install.md's console block (not run by the docs tests) is the message require_runtimes gives."""
    block = INSTALL_PAGE.read_text().split("```console\n", 1)[1].split("```", 1)[0].splitlines()
    shown = block[next(i for i, line in enumerate(block) if line.startswith("edgeship: error: ")):]
    without(monkeypatch, "executorch", "openvino", "nncf")
    with pytest.raises(MissingRuntimeError) as e:
        runtimes.require_runtimes(load_profile("host"))
    printed = f"edgeship: error: {e.value}".splitlines()
    assert [re.sub(r"\(\S*/host\.toml\)", "(host.toml)", line) for line in shown] == \
        [re.sub(r"\(\S*/host\.toml\)", "(host.toml)", line) for line in printed]
