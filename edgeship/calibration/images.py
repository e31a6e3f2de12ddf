"""Image folders as data sets: decoded with Pillow and prepared as the model spec's ``[preprocess]`` says.

Images directly in the folder are unlabelled; images in class subfolders (``cat/1.jpg``,
``dog/2.png``, as torchvision's ImageFolder reads them) are labelled by class: by the line of the
spec's labels file naming the folder when every folder is named there, else by sorted folder
name. Samples are drawn (seeded) before decoding, so a large folder costs only what is used.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeship import stopping
from edgeship.calibration.dataset import Dataset, sample_indices
from edgeship.errors import DataError
from edgeship.spec import ModelSpec, PreprocessSpec

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}


def image_files(folder: Path) -> list[Path]:
    """Every image under ``folder``, sorted (DataError when there is none)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError(f"{folder}: no images found (looked for {', '.join(sorted(IMAGE_SUFFIXES))}, "
                        "in the folder or in class subfolders)")
    return files


def class_labels(folder: Path, files: list[Path], spec: ModelSpec) -> np.ndarray | None:
    """Class indices from each image's subfolder, or None when the images sit in ``folder`` itself."""
    top = [p.relative_to(folder).parts for p in files]
    flat = [p for p in top if len(p) == 1]
    if len(flat) == len(top):
        return None
    if flat:
        raise DataError(f"{folder}: has images both at the top ({flat[0][0]}) and in class subfolders; "
                        "put every image in a class folder, or none")
    classes = sorted({parts[0] for parts in top})
    names = spec.label_names() or []
    order = names if set(classes) <= set(names) else classes
    return np.array([order.index(parts[0]) for parts in top], dtype=np.int64)


def decode(path: Path, pre: PreprocessSpec) -> np.ndarray:
    """One image as float32 in [0, 1], resized, center-cropped, normalized, in the spec's layout."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # refused, not decoded
            image = Image.open(path)
        with image:
            image = image.convert(pre.color)
            if pre.resize:
                image = image.resize((pre.resize[1], pre.resize[0]), Image.Resampling.BILINEAR)
            if pre.crop:
                image = _center_crop(image, pre.crop)
            array = np.asarray(image, dtype=np.float32) / 255.0
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as e:
        raise DataError(f"{path}: its header declares {_pixels(e)} pixels, more than the {Image.MAX_IMAGE_PIXELS:,} "
                        "an image may have here (PIL's limit against decompression bombs); a model's input "
                        "image is far smaller: resize it") from None
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise DataError(f"{path}: not a readable image: {e}") from None
    array = array.reshape(array.shape[0], array.shape[1], -1)  # grayscale gets its channel axis
    if pre.mean is not None:
        array = array - np.asarray(pre.mean, np.float32)
    if pre.std is not None:
        array = array / np.asarray(pre.std, np.float32)
    return array if pre.layout == "NHWC" else array.transpose(2, 0, 1)


def _pixels(e: Exception) -> str:
    """The pixel count PIL's decompression-bomb message names, with thousands separators."""
    import re

    found = re.search(r"\((\d+) pixels\)", str(e))
    return f"{int(found.group(1)):,}" if found else "too many"


def _center_crop(image, size: list[int]):
    height, width = size
    left, top = (image.width - width) // 2, (image.height - height) // 2
    if left < 0 or top < 0:
        raise ValueError(f"image {image.width}x{image.height} is smaller than the crop {width}x{height}")
    return image.crop((left, top, left + width, top + height))


def read_image_folder(folder: Path, spec: ModelSpec, limit: int | None = None, seed: int = 0) -> Dataset:
    """A Dataset of the folder's images, each checked against the model's input shape."""
    if len(spec.inputs) != 1:
        raise DataError(f"{folder}: an image folder feeds a one-input model; this model has "
                        f"{len(spec.inputs)} inputs ({', '.join(i.name for i in spec.inputs)}): use .npz")
    files = image_files(folder)
    labels = class_labels(folder, files, spec)
    chosen = sample_indices(len(files), limit, seed)
    want = list(spec.inputs[0].shape[1:])
    arrays = []
    for i in chosen:
        array = decode(files[i], spec.preprocess)
        if list(array.shape) != want:
            raise DataError(f"{files[i]}: decodes to shape {list(array.shape)}, but the model takes {want} "
                            f"per sample (input shape {spec.inputs[0].shape}); set [preprocess] resize/crop/"
                            f"color/layout in the model spec")
        arrays.append(array)
        stopping.progressed()  # an image read: the stage's watchdog waits from here
    name = spec.inputs[0].name
    return Dataset({name: np.stack(arrays)}, None if labels is None else labels[chosen],
                   f"{folder} ({len(chosen)} of {len(files)} images)")
