"""The shared templates ask the backends for their fragments (``bundle_templates``): every backend
a snippet platform takes writes its artifacts' functions, each declared file exists, and a backend
kept outside edgeship gets its fragment into a bundle's files with no shared file touched."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edgeship.backends.registry import SPECS, package_folder
from edgeship.bundle.fragments import fragment, fragments
from edgeship.bundle.platforms import PLATFORMS
from tests.backends.test_new_backend import new_backend

REPO = Path(__file__).resolve().parents[2]


def test_fragments_every_backend_a_snippet_platform_takes_writes_its_artifacts_functions() -> None:
    missing = [(platform.name, backend) for platform in PLATFORMS.values() if platform.snippet
               for backend in platform.backends
               if str(platform.snippet).removesuffix(".j2") not in SPECS[backend].bundle_templates]
    assert not missing, f"backends with no fragment for their platform's snippet: {missing}"


def test_fragments_declared_files_exist_in_the_backends_package() -> None:
    absent = [f"{name}: {path}" for name, spec in SPECS.items() for path in spec.bundle_templates.values()
              if not (package_folder(name) / path).is_file()]
    assert not absent, f"bundle_templates naming files that are not there: {absent}"


def test_fragments_come_in_registry_order_whatever_order_they_are_asked_in() -> None:
    android = PLATFORMS["android"].backends
    assert fragments("ModelLoader.kt", reversed(android)) == [f"{b}/{SPECS[b].bundle_templates['ModelLoader.kt']}"
                                                              for b in android]
    assert fragments("ModelLoader.kt", []) == []


def test_fragment_refuses_a_backend_that_declares_none_for_the_slot() -> None:
    with pytest.raises(RuntimeError, match="declares no bundle template for 'ModelLoader.kt'"):
        fragment("ModelLoader.kt", PLATFORMS["jetson"].backends[0])


SPEC_WITH_FRAGMENTS = '''
    bundle_platforms = ("android",)
    bundle_templates = {"ModelLoader.kt": "app/loader.kt.j2", "ModelLoader.kt:runtime": "app/runtime.kt.j2",
                        "README.md:android-runtime": "app/readme.md.j2"}
'''
RENDER = textwrap.dedent('''\
    from edgeship.bundle.fragments import fragments
    from edgeship.bundle.platforms import PLATFORMS
    from edgeship.bundle.selection import Selection
    from edgeship.bundle.snippets import snippet
    from edgeship.spec import ModelSpec

    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 8, 8]}])
    artifact = {"variant": "frozen", "backend": "frozen-torchscript", "precision": "fp32", "path": "assets/frozen.pt",
                "runtime": {}}
    android = PLATFORMS["android"]
    print(snippet(android, {"model": "m", "artifacts": [artifact]}, spec, Selection(android))[1])
    print(fragments("README.md:android-runtime", PLATFORMS["android"].backends))
    ''')


def test_fragments_of_a_backend_from_outside_edgeship_go_into_the_snippet(tmp_path: Path) -> None:
    plugins = new_backend(tmp_path / "plugins")
    package = plugins / "frozen_torchscript"
    (package / "spec.py").write_text((package / "spec.py").read_text() + SPEC_WITH_FRAGMENTS)
    (package / "app").mkdir()
    (package / "app" / "loader.kt.j2").write_text('\nfun load{{ a.ident }}() = frozen("{{ a.asset }}")\n')
    (package / "app" / "runtime.kt.j2").write_text("Frozen (org.example:frozen) for .pt files\n")
    (package / "app" / "readme.md.j2").write_text("`org.example:frozen` for `.pt`\n")
    env = {**os.environ, "EDGESHIP_BACKENDS_PATH": str(plugins), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", RENDER], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert 'fun loadFrozen() = frozen("frozen.pt")' in proc.stdout
    assert ", Frozen (org.example:frozen) for .pt files.\n" in proc.stdout  # after edgeship's own runtimes
    assert "'frozen-torchscript/app/readme.md.j2']" in proc.stdout
