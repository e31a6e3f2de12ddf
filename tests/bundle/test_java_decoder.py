"""The Java SSD decoder shipped in Android bundles (edgeship/bundle/templates/SsdDecoder.java)
against the Python reference (edgeship/devices/postprocess.py: decode_ssd), compiled and run with
the JDK; and its place in the bundle (postprocess/SsdDecoder.java, decode.json, ModelLoader.kt)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeship.bundle.make import postprocess_files
from edgeship.bundle.platforms import PLATFORMS
from edgeship.bundle.selection import Selection
from edgeship.bundle.snippets import snippet
from edgeship.devices.postprocess import VANILLA_NMS_ABOVE, decode_ssd, softmax
from edgeship.spec import ModelSpec
from tests import system

REPO = Path(__file__).resolve().parents[2]
JAVA_DECODER = REPO / "edgeship" / "bundle" / "templates" / "SsdDecoder.java"
EXAMPLE = REPO / "examples" / "detection"
RTOL = 1e-5  # float32 rounding: numpy's float32 exp is up to 2 ulp off Java's correctly rounded one

HARNESS = """\
import ai.edgeship.SsdDecoder;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/** decode <folder>: the detections of folder's anchors.npy, box.f32, logits.f32 and settings.txt;
 *  anchors <file.npy>: the anchors as read. One line per row, floats as Float.toString. */
public class DecoderHarness {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("anchors")) {
            float[][] anchors;
            try (InputStream in = Files.newInputStream(Paths.get(args[1]))) {
                anchors = SsdDecoder.readAnchorsNpy(in);
            } catch (IOException e) {
                System.out.println("error " + e.getMessage());
                return;
            }
            for (float[] a : anchors) {
                System.out.println(a[0] + " " + a[1] + " " + a[2] + " " + a[3]);
            }
            return;
        }
        Path dir = Paths.get(args[1]);
        float[][] anchors;
        try (InputStream in = Files.newInputStream(dir.resolve("anchors.npy"))) {
            anchors = SsdDecoder.readAnchorsNpy(in);
        }
        String[] s = new String(Files.readAllBytes(dir.resolve("settings.txt")), "UTF-8").trim().split(" ");
        double[] weights = {Double.parseDouble(s[0]), Double.parseDouble(s[1]), Double.parseDouble(s[2]),
                            Double.parseDouble(s[3])};
        int height = Integer.parseInt(s[9]);
        int width = Integer.parseInt(s[10]);
        SsdDecoder decoder = new SsdDecoder(anchors, weights, Double.parseDouble(s[4]), Double.parseDouble(s[5]),
                Integer.parseInt(s[6]), Integer.parseInt(s[7]), Integer.parseInt(s[8]),
                height > 0 ? new int[] {height, width} : null);
        float[] boxRegression = floats(dir.resolve("box.f32"));
        for (SsdDecoder.Detection d : decoder.decode(boxRegression, floats(dir.resolve("logits.f32")))) {
            System.out.println(d.label + " " + d.score + " " + d.x1 + " " + d.y1 + " " + d.x2 + " " + d.y2);
        }
    }

    static float[] floats(Path path) throws IOException {
        byte[] bytes = Files.readAllBytes(path);
        float[] out = new float[bytes.length / 4];
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }
}
"""


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory) -> Path:
    """SsdDecoder.java (as Java 8) and the harness, compiled once for the module."""
    if system.java():
        pytest.skip(system.java())
    folder = tmp_path_factory.mktemp("java")
    (folder / "DecoderHarness.java").write_text(HARNESS)
    out = folder / "classes"
    done = subprocess.run(["javac", "--release", "8", "-Xlint:all", "-Xlint:-options", "-Werror", "-d", str(out),
                           str(JAVA_DECODER), str(folder / "DecoderHarness.java")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def run_harness(classes: Path, *args: str) -> list[str]:
    done = subprocess.run(["java", "-cp", str(classes), "DecoderHarness", *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def decode_java(classes: Path, folder: Path, box_regression, class_logits, anchors, weights=(10.0, 10.0, 5.0, 5.0),
                score_threshold=0.01, iou_threshold=0.55, candidates_per_class=300, max_detections=300, background=0,
                image_size=None):
    """decode_ssd's detections computed by the Java decoder: (boxes [n, 4], scores [n], labels [n])."""
    folder.mkdir()
    np.save(folder / "anchors.npy", np.asarray(anchors, dtype="<f4"))
    np.asarray(box_regression, dtype="<f4").tofile(folder / "box.f32")
    np.asarray(class_logits, dtype="<f4").tofile(folder / "logits.f32")
    height, width = image_size or (0, 0)
    numbers = [*weights, repr(float(score_threshold)), repr(float(iou_threshold)), candidates_per_class,
               max_detections, -1 if background is None else background, height, width]
    (folder / "settings.txt").write_text(" ".join(str(n) for n in numbers))
    rows = [line.split() for line in run_harness(classes, "decode", str(folder))]
    boxes = np.array([[np.float32(v) for v in r[2:]] for r in rows], dtype=np.float32).reshape(-1, 4)
    scores = np.array([np.float32(r[1]) for r in rows], dtype=np.float32)
    labels = np.array([int(r[0]) for r in rows], dtype=np.int64)
    return boxes, scores, labels


def compare(classes: Path, folder: Path, *arrays, **settings) -> tuple:
    """The Java and Python detections of the same inputs, checked equal: the same count and labels
    in the same order, scores within RTOL, boxes within RTOL of the largest coordinate.
    Returns the Python detections and the largest box and score differences."""
    java = decode_java(classes, folder, *arrays, **settings)
    python = decode_ssd(*arrays, **settings)
    assert len(java[2]) == len(python[2]), f"java {len(java[2])} detections, python {len(python[2])}"
    np.testing.assert_array_equal(java[2], python[2])
    np.testing.assert_allclose(java[1], python[1], rtol=RTOL, atol=0)
    scale = float(np.abs(python[0]).max()) if len(python[0]) else 1.0
    np.testing.assert_allclose(java[0], python[0], rtol=RTOL, atol=RTOL * scale)
    box_diff = float(np.abs(java[0] - python[0]).max()) if len(python[0]) else 0.0
    score_diff = float(np.abs(java[1] - python[1]).max()) if len(python[1]) else 0.0
    return python, box_diff, score_diff


def candidates(class_logits, score_threshold, candidates_per_class, background) -> int:
    """How many candidates decode_ssd hands to NMS (which NMS path it takes: <= VANILLA_NMS_ABOVE or not)."""
    scores = softmax(class_logits)
    return sum(min(candidates_per_class, int((scores[:, c] > np.float32(score_threshold)).sum()))
               for c in range(scores.shape[1]) if c != background)


def clustered_anchors(rng, n: int) -> np.ndarray:
    """n xyxy anchors around 12 centres of a 320x320 image (some at its borders), so that many overlap."""
    grid = np.array([(x, y) for x in (10, 110, 210, 310) for y in (10, 160, 310)], dtype=np.float64)
    centres = grid[rng.integers(0, len(grid), n)] + rng.normal(0, 6, (n, 2))
    sizes = rng.uniform(20, 100, (n, 2))
    return np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=1).astype(np.float32)


@pytest.mark.parametrize("anchors, classes, settings, per_class_nms", [
    (500, 6, {"score_threshold": 0.05, "iou_threshold": 0.45, "max_detections": 100, "image_size": (200, 300)}, True),
    (150, 5, {"weights": (8.0, 8.0, 4.0, 4.0), "iou_threshold": 0.3, "candidates_per_class": 100,
              "background": None}, False),
])
def test_java_decoder_matches_python_when_nms_is_busy(java_classes, tmp_path, anchors, classes, settings,
                                                      per_class_nms) -> None:
    rng = np.random.default_rng(anchors)
    anchor_boxes = clustered_anchors(rng, anchors)
    box_regression = rng.normal(0, 1, (anchors, 4)).astype(np.float32)
    box_regression[:3, 2:] = 25  # dw / ww, dh / wh above log(1000 / 16) = 4.14: clamped
    class_logits = rng.normal(0, 1, (anchors, classes)).astype(np.float32)
    found = candidates(class_logits, settings.get("score_threshold", 0.01), settings.get("candidates_per_class", 300),
                       settings.get("background", 0))
    assert (found > VANILLA_NMS_ABOVE) == per_class_nms  # both of batched_nms's paths are exercised
    (boxes, scores, labels), _, _ = compare(java_classes, tmp_path / "case", box_regression, class_logits,
                                            anchor_boxes, **settings)
    assert len(np.unique(labels)) == classes - (1 if settings.get("background", 0) == 0 else 0)
    unlimited = {**settings, "max_detections": 10**6}
    assert len(decode_ssd(box_regression, class_logits, anchor_boxes, **unlimited)[2]) < 0.8 * found  # NMS at work
    if "image_size" in settings:  # (height 200, width 300): some boxes clipped at each border
        assert (boxes[:, 2] == 300).any() and (boxes[:, 3] == 200).any() and (boxes[:, :2] == 0).any()


# Zero offsets: the boxes are the anchors exactly. Four classes (0: background).
TIE_ANCHORS = [[10, 10, 50, 50], [10, 10, 50, 50], [10, 10, 50, 50],    # 0-2: the same box
               [100, 100, 140, 140], [100, 100, 120, 140],             # 3-4: IoU exactly 0.5
               [200, 200, 240, 240],                                   # 5
               [250, 0, 260, 10], [270, 0, 280, 10], [290, 0, 300, 10], [250, 20, 260, 30]]  # 6-9: apart
TIE_LOGITS = [[0, 2, 2, -20], [0, 2, 2, -20], [0, 2, 2, -20],  # classes 1 and 2 tie; so do anchors 0-2
              [0, 3, -20, -20], [0, 3, -20, -20],              # a tie whose IoU is the threshold
              [0, 2, 2, -20],                                  # ties anchors 0-2
              *[[0, -20, -20, 2.5]] * 4]                       # 6-9: 4 ties, 3 candidates


def test_java_decoder_breaks_score_ties_like_python(java_classes, tmp_path) -> None:
    settings = {"score_threshold": 0.2, "iou_threshold": 0.5, "candidates_per_class": 3, "max_detections": 6}
    (boxes, scores, labels), _, _ = compare(java_classes, tmp_path / "case", np.zeros((10, 4), np.float32),
                                            np.array(TIE_LOGITS, np.float32), np.array(TIE_ANCHORS, np.float32),
                                            **settings)
    anchors = [TIE_ANCHORS.index([int(v) for v in b]) for b in boxes]  # the first anchor with that box
    # class 1: 3 and 4 (IoU 0.5 is not above 0.5: both kept), then 0 (of the tied 0, 1, 2, 5 the 3
    # candidates are the lower ones); class 3: 6, 7, 8 of the tied 6-9; class 2: 0 suppresses the
    # tied 1 and 2, and is cut by max_detections (class 1's equal score is the earlier candidate).
    assert list(zip(labels.tolist(), anchors)) == [(1, 3), (1, 4), (3, 6), (3, 7), (3, 8), (1, 0)]
    assert scores[0] == scores[1] and scores[2] == scores[4]
    assert decode_ssd(np.zeros((10, 4)), TIE_LOGITS, TIE_ANCHORS, **{**settings, "max_detections": 7})[2][-1] == 2


@pytest.fixture(scope="module")
def ssdlite_anchors() -> np.ndarray:
    """SSDLite320's 3234 anchors, from examples/detection/ssdlite.py's ``anchors`` (needs torchvision)."""
    pytest.importorskip("torchvision", reason=system.reason("python", "torchvision is not installed (make setup)"))
    sys.path.insert(0, str(EXAMPLE))
    try:
        import ssdlite
    finally:
        sys.path.remove(str(EXAMPLE))
    return ssdlite.anchors()


@pytest.mark.parametrize("background_logit, per_class_nms", [(13.0, False), (12.0, True)])
def test_java_decoder_matches_python_on_ssdlite_anchors(java_classes, ssdlite_anchors, tmp_path, background_logit,
                                                        per_class_nms) -> None:
    rng = np.random.default_rng(0)
    class_logits = rng.normal(0, 2, (len(ssdlite_anchors), 91)).astype(np.float32)
    class_logits[:, 0] += background_logit  # a few hundred anchors above score 0.01, as a detector's
    box_regression = rng.normal(0, 1.5, (len(ssdlite_anchors), 4)).astype(np.float32)
    assert (candidates(class_logits, 0.01, 300, 0) > VANILLA_NMS_ABOVE) == per_class_nms
    (boxes, _, labels), _, _ = compare(java_classes, tmp_path / "case", box_regression, class_logits, ssdlite_anchors,
                                       image_size=(320, 320))
    assert len(labels) == 300 and len(np.unique(labels)) > 80
    assert (boxes == 0).any() and (boxes == 320).any()  # clipped at the image's borders


def test_java_decoder_finds_nothing_when_no_class_scores_above_the_threshold(java_classes, tmp_path) -> None:
    rng = np.random.default_rng(3)
    anchors = clustered_anchors(rng, 50)
    box_regression = rng.normal(0, 1, (50, 4)).astype(np.float32)
    logits = rng.normal(0, 1, (50, 4)).astype(np.float32)
    logits[:, 0] += 20  # every class but the background scores below 0.01
    (_, _, low), _, _ = compare(java_classes, tmp_path / "low", box_regression, logits, anchors)
    (_, _, only), _, _ = compare(java_classes, tmp_path / "background-only", box_regression,
                                 np.zeros((50, 1), np.float32), anchors)  # one class, the background
    (_, _, equal), _, _ = compare(java_classes, tmp_path / "at-threshold", box_regression,
                                  np.zeros((50, 4), np.float32), anchors, score_threshold=0.25)  # 0.25 is not above
    assert len(low) == 0 and len(only) == 0 and len(equal) == 0


def test_read_anchors_npy_reads_c_and_fortran_order_and_names_a_wrong_file(java_classes, tmp_path) -> None:
    anchors = np.arange(12, dtype=np.float32).reshape(3, 4) + np.float32(0.25)
    with open(tmp_path / "v2-fortran.npy", "wb") as f:
        np.lib.format.write_array(f, np.asfortranarray(anchors), version=(2, 0))
    np.save(tmp_path / "v1.npy", anchors)
    for name in ("v1.npy", "v2-fortran.npy"):
        got = np.array([[float(v) for v in line.split()] for line in
                        run_harness(java_classes, "anchors", str(tmp_path / name))], dtype=np.float32)
        np.testing.assert_array_equal(got, anchors)
    np.save(tmp_path / "f64.npy", anchors.astype(np.float64))
    np.save(tmp_path / "flat.npy", anchors.ravel())
    assert run_harness(java_classes, "anchors", str(tmp_path / "f64.npy")) == [
        "error anchors: dtype '<f8', expected little-endian float32 ('<f4'); save them with "
        "numpy.save(path, anchors.astype('<f4'))"]
    assert run_harness(java_classes, "anchors", str(tmp_path / "flat.npy")) == [
        "error anchors: shape [12], expected [anchors, 4] (xyxy boxes)"]


def detector_spec(folder: Path) -> ModelSpec:
    """A host-decoded detector whose anchors come from a module in ``folder``."""
    (folder / "javadet_anchors.py").write_text(
        "import numpy as np\n\n\ndef anchors():\n    return np.array([[0, 0, 8, 8], [4, 4, 12, 12]], np.float32)\n")
    return ModelSpec(name="det", entry="javadet_anchors:anchors", task="detection", base_dir=folder,
                     inputs=[{"name": "image", "shape": [1, 3, 16, 24]}],
                     detection={"postprocess": "host", "decode": {"boxes": "bbox_regression", "scores": "cls_logits",
                                                                  "anchors": "javadet_anchors:anchors"}})


def test_android_bundle_of_a_host_decoded_detector_carries_the_java_decoder(tmp_path) -> None:
    spec = detector_spec(tmp_path)
    files = postprocess_files(spec, {}, "android")
    assert files["postprocess/SsdDecoder.java"] == JAVA_DECODER and JAVA_DECODER.is_file()
    settings = json.loads(files["postprocess/decode.json"])
    assert "SsdDecoder.readAnchorsNpy" in settings["usage_java"] and settings["arguments"]["image_size"] == [16, 24]
    for platform in ("ios", "jetson"):
        other = postprocess_files(spec, {}, platform)
        assert "postprocess/SsdDecoder.java" not in other and "usage_java" not in json.loads(
            other["postprocess/decode.json"])
    classifier = ModelSpec(name="c", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 8, 8]}])
    assert postprocess_files(classifier, {}, "android") == {}


def test_kotlin_snippet_shows_the_decoder_only_for_a_host_decoded_detector(tmp_path) -> None:
    pte = {"variant": "pte", "backend": "executorch", "precision": "fp32", "path": "assets/pte.pte",
           "runtime": {"needs": "ExecuTorch", "written_by": "executorch 1.5.1", "delegate": "XNNPACK"}}
    meta = {"model": "det", "artifacts": [pte]}
    _, text = snippet(PLATFORMS["android"], meta, detector_spec(tmp_path), Selection(PLATFORMS["android"]))
    assert "ai.edgeship.SsdDecoder.readAnchorsNpy(it)" in text and "bbox_regression" in text
    model = ModelSpec(name="det", entry="m:build", task="detection", inputs=[{"name": "image", "shape": [1, 3, 8, 8]}])
    _, text = snippet(PLATFORMS["android"], meta, model, Selection(PLATFORMS["android"]))
    assert "SsdDecoder" not in text
