"""Image folders: decoding with the spec's [preprocess], labels from class folders, clear refusals."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgeship.calibration import load_dataset
from edgeship.errors import DataError
from edgeship.spec import ModelSpec


def _spec(tmp_path: Path, shape: list[int], labels: list[str] | None = None, **preprocess) -> ModelSpec:
    label_file = None
    if labels:
        label_file = tmp_path / "labels.txt"
        label_file.write_text("\n".join(labels) + "\n")
    return ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": shape}],
                     labels=label_file, preprocess=preprocess, base_dir=tmp_path)


def _image(path: Path, size: tuple[int, int], value: int, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, (value,) * len(mode) if mode != "L" else value).save(path)


def test_images_flat_folder_resized_cropped_normalized_nchw(tmp_path: Path) -> None:
    for i in range(3):
        _image(tmp_path / "imgs" / f"{i}.png", (40, 30), 51 * i)
    spec = _spec(tmp_path, [1, 3, 16, 16], resize=[20, 24], crop=[16, 16], mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
    data = load_dataset(tmp_path / "imgs", spec, "calibration")
    x = data.inputs["image"]
    assert x.shape == (3, 3, 16, 16) and x.dtype == np.float32 and data.labels is None
    assert np.allclose(x[0], -1.0) and np.allclose(x[1], (51 / 255 - 0.5) / 0.5, atol=1e-6)


def test_images_grayscale_nhwc_layout(tmp_path: Path) -> None:
    _image(tmp_path / "g" / "a.png", (8, 8), 255, mode="RGB")
    data = load_dataset(tmp_path / "g", _spec(tmp_path, [1, 8, 8, 1], color="L", layout="NHWC"), "calibration")
    assert data.inputs["image"].shape == (1, 8, 8, 1) and np.allclose(data.inputs["image"], 1.0)


def test_images_class_folders_follow_the_labels_file(tmp_path: Path) -> None:
    for cls in ("dog", "cat"):
        _image(tmp_path / "data" / cls / "1.png", (8, 8), 10)
    spec = _spec(tmp_path, [1, 3, 8, 8], labels=["dog", "bird", "cat"])
    data = load_dataset(tmp_path / "data", spec, "evaluation")
    assert data.labels.tolist() == [2, 0]  # cat/1.png then dog/1.png, indexed by labels.txt
    without = load_dataset(tmp_path / "data", _spec(tmp_path / "x", [1, 3, 8, 8]), "evaluation")
    assert without.labels.tolist() == [0, 1]  # sorted folder names


def test_images_seeded_sampling_matches_take(tmp_path: Path) -> None:
    for i in range(10):
        _image(tmp_path / "many" / f"{i:02d}.png", (8, 8), 20 * i)
    spec = _spec(tmp_path, [1, 3, 8, 8])
    drawn = load_dataset(tmp_path / "many", spec, "calibration", limit=4, seed=7)
    full = load_dataset(tmp_path / "many", spec, "calibration").take(4, seed=7)
    assert len(drawn) == 4 and np.array_equal(drawn.inputs["image"], full.inputs["image"])


def test_images_empty_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    with pytest.raises(DataError, match=r"empty: no images found"):
        load_dataset(tmp_path / "empty", _spec(tmp_path, [1, 3, 8, 8]), "calibration")


def test_images_unreadable_image_is_named(tmp_path: Path) -> None:
    _image(tmp_path / "bad" / "ok.png", (8, 8), 1)
    (tmp_path / "bad" / "broken.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(DataError, match=r"broken\.jpg: not a readable image"):
        load_dataset(tmp_path / "bad", _spec(tmp_path, [1, 3, 8, 8]), "calibration")


def test_images_wrong_size_names_the_file_and_both_shapes(tmp_path: Path) -> None:
    _image(tmp_path / "odd" / "big.png", (12, 10), 1)
    with pytest.raises(DataError) as e:
        load_dataset(tmp_path / "odd", _spec(tmp_path, [1, 3, 8, 8]), "calibration")
    assert "big.png" in str(e.value) and "[3, 10, 12]" in str(e.value) and "[3, 8, 8]" in str(e.value)


def test_images_mixed_top_level_and_class_folders_is_refused(tmp_path: Path) -> None:
    _image(tmp_path / "mix" / "top.png", (8, 8), 1)
    _image(tmp_path / "mix" / "cls" / "in.png", (8, 8), 1)
    with pytest.raises(DataError, match="both at the top"):
        load_dataset(tmp_path / "mix", _spec(tmp_path, [1, 3, 8, 8]), "calibration")
