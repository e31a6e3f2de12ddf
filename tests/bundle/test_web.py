"""The web bundle of a real build of the tiny model: a static site (demo page, ES module,
onnxruntime-web's wasm files, the models, a sample) as a zip and, from ``edgeship bundle``, unpacked
beside it; the folder verifies in place and is never replaced over files edgeship did not write. In
real Chromium (Debian's, through playwright): the page, served from 127.0.0.1 with the isolation
headers, runs the bundled sample to the float model's class, asking no other host for anything;
and edgeship-model.js prepares images exactly as calibration/images.py does with Pillow."""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

from edgeship import api
from edgeship.bundle.platforms import PLATFORMS
from edgeship.cli import main
from edgeship.errors import BundleError, OutputError
from edgeship.webfiles import ORT_FILES, ort_web_package, ort_web_version
from tests import system
from tests.conftest import make_tiny_project, write_profile
from tests.reports.builds import LABELS
from tests.reports.test_browser import CHROMIUM

VARIANTS = """
[[variants]]
name = "web-fp32"
backend = "onnx-web"
precision = "fp32"

[[variants]]
name = "web-int8"
backend = "onnx-web"
precision = "int8"
quantization = { scheme = "static", method = "minmax", per_channel = true }

[bundle]
platforms = ["web"]
"""
SITE = ["README.md", "edgeship-model.js", "index.html", "labels.txt", "manifest.json", "model.json",
        "models/web-fp32.onnx", "models/web-int8.onnx", "ort/ort-wasm-simd-threaded.mjs",
        "ort/ort-wasm-simd-threaded.wasm", "ort/ort.wasm.min.mjs", "ort/package.json", "sample.bin"]


@pytest.fixture(scope="module")
def web_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model (with labels) built for onnx-web, measured on the host only (the browser device
    has its own tests), with ``[bundle] platforms = ["web"]``: the build folder."""
    if system.onnxruntime_web():
        pytest.skip(system.onnxruntime_web())
    root = tmp_path_factory.mktemp("web")
    project = make_tiny_project(root / "tiny")
    (project / "labels.txt").write_text("\n".join(LABELS) + "\n")
    spec = project / "model.toml"
    spec.write_text(spec.read_text().replace('weights = "tiny.pt"\n', 'weights = "tiny.pt"\nlabels = "labels.txt"\n'))
    profile = write_profile(root, VARIANTS, name="webtest")
    out = root / "out"
    assert main(["build", "--target", str(profile), "--model", str(spec), "--out", str(out), "--device", "host",
                 "--quiet"]) == 0  # the onnx-web rows are "not measured" on the host: no gate fails
    return out


def _names(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return sorted(zf.namelist())


def _read(path: Path, name: str) -> bytes:
    with zipfile.ZipFile(path) as zf:
        return zf.read(name)


def _bundle_again(web_build: Path, out: Path) -> list:
    """``edgeship bundle`` of the web build's profile and spec into ``out`` (a copy of the build folder)."""
    root = web_build.parent
    return api.bundle(str(root / "webtest.toml"), str(root / "tiny" / "model.toml"), out=out)


def test_web_bundle_holds_the_site_the_validated_models_and_onnxruntime_web(web_build: Path) -> None:
    bundle = web_build / "tiny-web.zip"
    assert _names(bundle) == SITE
    assert _read(bundle, "models/web-fp32.onnx") == (web_build / "web-fp32" / "model.onnx").read_bytes()
    dist = ort_web_package() / "dist"
    assert all(_read(bundle, f"ort/{name}") == (dist / name).read_bytes() for name in ORT_FILES)
    page = _read(bundle, "index.html").decode()
    assert 'from "./edgeship-model.js"' in page and "://" not in page
    module = _read(bundle, "edgeship-model.js").decode()
    assert 'import * as ort from "./ort/ort.wasm.min.mjs";' in module and "/*@EDGESHIP_MODEL@*/" not in module
    assert "://" not in module
    assert 'ort.env.wasm.wasmPaths = new URL("./ort/", import.meta.url).href' in module
    readme = _read(bundle, "README.md").decode()
    assert "Cross-Origin-Opener-Policy: same-origin" in readme
    assert "Cross-Origin-Embedder-Policy: require-corp" in readme
    assert "Nothing is fetched from a CDN" in readme


def test_web_bundle_sample_is_the_first_evaluation_sample_and_model_json_says_where(web_build: Path) -> None:
    from edgeship.calibration.dataset import sample_indices

    bundle = web_build / "tiny-web.zip"
    meta = json.loads(_read(bundle, "model.json"))
    assert meta["sample"]["inputs"] == [{"name": "image", "dtype": "float32", "shape": [1, 3, 16, 16], "offset": 0,
                                         "bytes": 3 * 16 * 16 * 4}]
    with np.load(web_build.parent / "tiny" / "eval.npz") as npz:
        first = npz["x"][sample_indices(32, 24, 0)][:1]  # the profile evaluates 24 of 32, seed 0
    sample = np.frombuffer(_read(bundle, "sample.bin"), "<f4").reshape(1, 3, 16, 16)
    assert np.array_equal(sample, first)
    module = _read(bundle, "edgeship-model.js").decode()
    embedded = json.loads(module.split("export const MODEL = ", 1)[1].split(";\nexport { ort };", 1)[0])
    assert embedded == {**meta, "task": "classification", "image_input": False}
    assert meta["artifacts"][0]["runtime"]["graph_optimization"] == "all"


def test_web_manifest_records_onnxruntime_web_and_every_file(web_build: Path) -> None:
    bundle = web_build / "tiny-web.zip"
    manifest = json.loads(_read(bundle, "manifest.json"))
    assert manifest["platform"] == "web" and ort_web_version() == "1.30.0"
    assert manifest["onnxruntime_web"] == {"version": "1.30.0", "build_toolchain": "1.30.0",
                                           "files": [f"ort/{n}" for n in ORT_FILES],
                                           "license": "MIT (see ort/package.json)"}
    listed = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert sorted(listed) == [n for n in SITE if n != "manifest.json"]
    assert all(hashlib.sha256(_read(bundle, n)).hexdigest() == sha for n, sha in listed.items())
    assert api.verify_bundle(bundle).platform == "web"


def test_bundle_command_writes_the_web_bundle_unpacked_beside_its_zip(capsys, web_build: Path,
                                                                      tmp_path: Path) -> None:
    import shutil

    build = tmp_path / "out"
    shutil.copytree(web_build, build)
    root = web_build.parent
    argv = ["bundle", "--target", str(root / "webtest.toml"), "--model", str(root / "tiny" / "model.toml"),
            "--out", str(build), "--platform", "web"]
    assert main(argv) == 0
    assert f"wrote {build / 'tiny-web.zip'} and {build / 'tiny-web'}/ (unpacked)" in capsys.readouterr().out
    folder = build / "tiny-web"
    present = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert present == SITE
    assert all((folder / n).read_bytes() == _read(build / "tiny-web.zip", n) for n in SITE)
    assert main(["bundle", "verify", str(folder)]) == 0
    assert f"ok: {folder}: web bundle, {len(SITE) - 1} files" in capsys.readouterr().out


def test_bundle_verify_names_a_changed_or_unlisted_file_of_the_unpacked_folder(capsys, web_build: Path,
                                                                               tmp_path: Path) -> None:
    folder = tmp_path / "tiny-web"
    api.extract_bundle(web_build / "tiny-web.zip", folder)
    assert api.verify_bundle(folder).files == len(SITE) - 1
    (folder / "index.html").write_text("<p>changed</p>")
    assert main(["bundle", "verify", str(folder)]) == 2
    assert f"{folder}: index.html: differs from manifest.json" in capsys.readouterr().err
    (folder / "index.html").write_bytes(_read(web_build / "tiny-web.zip", "index.html"))
    (folder / "ort" / "extra.js").write_text("fetch('https://cdn.example/x')")
    with pytest.raises(BundleError, match="ort/extra.js: in the folder but not listed in manifest.json"):
        api.verify_bundle(folder)
    (folder / "ort" / "extra.js").unlink()
    (folder / "sample.bin").unlink()
    (folder / "sample.bin").symlink_to(web_build / "tiny-web.zip")
    with pytest.raises(BundleError, match="sample.bin: a symbolic link; refused"):
        api.verify_bundle(folder)


def test_web_bundle_folder_is_replaced_whole_but_never_over_files_edgeship_did_not_write(web_build: Path,
                                                                                         tmp_path: Path) -> None:
    import shutil

    build = tmp_path / "out"
    shutil.copytree(web_build, build)
    first = _bundle_again(web_build, build)[0]
    assert first.folder == build / "tiny-web"
    (first.folder / "models" / "web-int8.onnx").write_bytes(b"edgeship's file, changed")
    _bundle_again(web_build, build)  # edgeship's own files are replaced
    assert api.verify_bundle(first.folder).files == len(SITE) - 1
    zip_bytes = (build / "tiny-web.zip").read_bytes()
    (first.folder / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"tiny-web: holds .*notes.txt, which edgeship did not write"):
        _bundle_again(web_build, build)
    assert (first.folder / "notes.txt").read_text() == "mine" and (build / "tiny-web.zip").read_bytes() == zip_bytes
    (first.folder / "notes.txt").unlink()
    shutil.rmtree(first.folder)
    first.folder.mkdir()
    (first.folder / "index.html").write_text("someone's site")
    with pytest.raises(OutputError, match="tiny-web: exists and holds no edgeship bundle manifest"):
        _bundle_again(web_build, build)
    assert (first.folder / "index.html").read_text() == "someone's site"


def test_web_bundle_signature_of_the_zip_covers_its_unpacked_folder(web_build: Path, tmp_path: Path) -> None:
    import shutil

    build = tmp_path / "out"
    shutil.copytree(web_build, build)
    folder = _bundle_again(web_build, build)[0].folder
    private, public, key_id = api.bundle_keygen(tmp_path / "keys" / "signing.pem")
    signed = api.sign_bundle(build / "tiny-web.zip", private)
    assert signed.path == build / "tiny-web.zip.sig"
    check = api.verify_bundle(folder, public_key=public)
    assert check.signed_by == key_id and check.signature == signed.path
    (folder / "labels.txt").write_text("forged\n")
    with pytest.raises(BundleError, match="labels.txt: differs from manifest.json"):
        api.verify_bundle(folder, public_key=public)


def test_cli_platform_choices_are_the_bundle_platforms() -> None:
    import argparse

    from edgeship.cli import add_bundle_parser

    sub = argparse.ArgumentParser().add_subparsers()
    add_bundle_parser(sub)
    action = next(a for a in sub.choices["bundle"]._actions if a.dest == "platform")
    assert action.choices == list(PLATFORMS)


def _float_class(build: Path, sample: np.ndarray) -> int:
    import torch

    from edgeship.model import load_model
    from edgeship.spec import load_spec

    module = load_model(load_spec(build.parent / "tiny" / "model.toml")).module
    with torch.inference_mode():
        return int(module(torch.from_numpy(sample)).argmax(1)[0])


class Page:
    """A page opened in Chromium with what it requested, its errors and its console errors."""

    def __init__(self, browser, url: str) -> None:
        self.requests: list[str] = []
        self.problems: list[str] = []
        context = browser.new_context()
        context.on("request", lambda r: self.requests.append(r.url))
        context.on("response", lambda r: self.problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
        self.page = context.new_page()
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("console", lambda m: self.problems.append(m.text) if m.type == "error" else None)
        self.page.goto(url, wait_until="load")

    def hosts(self) -> set[str]:
        return {urlparse(u).hostname or u for u in self.requests}


def _run(page: Page, button: str) -> tuple[str, str | None, str, str]:
    """Click ``button``; status, class index, prediction and latency once that run has ended."""
    page.page.evaluate("document.getElementById('status').dataset.state = 'clicked'")
    page.page.click(button)
    page.page.wait_for_function("['done', 'error'].includes(document.getElementById('status').dataset.state)",
                                timeout=60_000)
    locate = page.page.locator
    return (locate("#status").inner_text(), locate("#prediction").get_attribute("data-class-index"),
            locate("#prediction").inner_text(), locate("#latency").inner_text())


@pytest.mark.skipif(system.browser() is not None, reason=str(system.browser()))
def test_web_bundle_page_in_chromium_runs_the_sample_to_the_float_models_class(web_build: Path,
                                                                               tmp_path: Path) -> None:
    from edgeship.devices.browser import Chromium, StaticServer

    site = tmp_path / "site"
    api.extract_bundle(web_build / "tiny-web.zip", site)
    sample = np.frombuffer((site / "sample.bin").read_bytes(), "<f4").reshape(1, 3, 16, 16)
    expected = _float_class(web_build, sample)
    shown = {}
    with StaticServer(site) as server, Chromium(str(CHROMIUM), timeout_s=60) as browser:
        page = Page(browser, server.url + "index.html")
        page.page.wait_for_function("document.getElementById('status').dataset.state === 'ready'", timeout=30_000)
        isolated = page.page.evaluate("crossOriginIsolated")
        shown_isolation = page.page.locator("#isolation").get_attribute("data-isolated")
        for variant in ("web-fp32", "web-int8"):
            page.page.select_option("#variant", f"models/{variant}.onnx")
            shown[variant] = _run(page, "#run-sample")
        page.page.select_option("#variant", "models/web-fp32.onnx")
        for name, write in (("sample.npy", lambda p: np.save(p, sample.astype(np.float64))),
                            ("sample-raw.bin", lambda p: p.write_bytes(sample.tobytes()))):
            write(tmp_path / name)
            page.page.set_input_files("#file-image", str(tmp_path / name))
            shown[name] = _run(page, "#run-file")
    assert isolated is True and shown_isolation == "true"
    assert page.problems == []
    assert page.hosts() == {"127.0.0.1"}, f"requests to other hosts: {page.requests}"
    status, index, text, latency = shown["web-fp32"]
    assert status == "done" and index == str(expected), (status, text)
    assert text.startswith(f"class {expected} ({LABELS[expected]}), score ")
    assert " ms (web-fp32, " in latency and latency.endswith("; the first run after loading includes one-time setup)")
    assert shown["web-int8"][0] == "done" and shown["web-int8"][1] in {str(i) for i in range(len(LABELS))}
    assert shown["sample.npy"][:2] == shown["sample-raw.bin"][:2] == ("done", str(expected))


def _png(path: Path, size: tuple[int, int], seed: int) -> Path:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels, "RGB").save(path)
    return path


IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


@pytest.mark.skipif(system.browser() is not None, reason=str(system.browser()))
@pytest.mark.parametrize(("preprocess", "shape", "sizes", "exact"), [
    ({"crop": [12, 10], "std": [0.25, 0.5, 2.0]}, [1, 3, 12, 10], [(37, 29), (16, 40), (64, 48)], True),
    ({"resize": [31, 9], "color": "L", "layout": "NHWC", "mean": [0.5]}, [1, 31, 9, 1], [(9, 40), (9, 20)], True),
    ({"resize": [29, 16], "crop": [16, 16], **IMAGENET}, [1, 3, 16, 16], [(37, 29), (64, 29), (10, 29)], True),
    ({"resize": [20, 24], "crop": [16, 16], **IMAGENET}, [1, 3, 16, 16], [(37, 29), (16, 40), (64, 48)], False),
])
def test_edgeship_model_js_prepares_images_as_edgeship_does_with_pillow(tmp_path: Path, preprocess: dict, shape: list,
                                                                        sizes: list, exact: bool) -> None:
    """Bit for bit when at most one side is resized. Resized on both sides, the installed Pillow (13.0.0) runs
    the vertical pass first for some sizes, where upstream's Resample.c, which the module follows, always runs
    the horizontal one first: the rounding between the passes then moves some pixels by one level of 255."""
    from edgeship.bundle.metadata import preprocessing
    from edgeship.bundle.web import MODEL_MARKER, MODULE, SITE
    from edgeship.calibration.images import decode
    from edgeship.devices.browser import Chromium, StaticServer
    from edgeship.spec import ModelSpec

    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": shape}], preprocess=preprocess)
    site = tmp_path / "site"
    (site / "ort").mkdir(parents=True)
    for name in ORT_FILES:
        (site / "ort" / name).write_bytes((ort_web_package() / "dist" / name).read_bytes())
    model = {"inputs": [{"name": "image", "shape": shape, "dtype": "float32"}], "preprocessing": preprocessing(spec),
             "image_input": True, "artifacts": []}
    (site / MODULE).write_text((SITE / MODULE).read_text().replace(MODEL_MARKER, json.dumps(model)))
    (site / "index.html").write_text('<!doctype html><link rel="icon" href="data:,"><script type="module">'
                                     'import * as m from "./edgeship-model.js"; window.m = m;</script>')
    images = [_png(site / f"i{n}.png", size, n) for n, size in enumerate(sizes)]
    with StaticServer(site) as server, Chromium(str(CHROMIUM), timeout_s=60) as browser:
        page = Page(browser, server.url + "index.html")
        page.page.wait_for_function("window.m !== undefined")
        prepared = [page.page.evaluate("async n => { const blob = await (await fetch(n)).blob();"
                                       " const p = await window.m.preprocessImage(blob);"
                                       " return {data: Array.from(p.data), shape: p.shape}; }", path.name)
                    for path in images]
    assert page.problems == []
    level = 1 / 255 / min(preprocess.get("std", [1.0]))  # one 8-bit level after normalising
    for path, got in zip(images, prepared):
        want = decode(path, spec.preprocess)
        data = np.asarray(got["data"], np.float32).reshape(want.shape)
        assert got["shape"] == shape
        if exact:
            assert np.array_equal(data, want), path.name
        else:
            assert np.abs(data - want).max() <= level * 1.0001, path.name
