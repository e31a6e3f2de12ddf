"""One batch of the build's evaluation samples, for a bundle's demo: ``sample.bin`` holds each input's
bytes (little-endian, in input order) and model.json says where each input lies in it.

The evaluation data are read again as the build read them (the profile's or the spec's data, the
profile's sample count and seed, else the same seeded random inputs) and compared with the sha256
of the inputs the build measured (results.json): data changed since the build still give a
sample, with a warning that it is not one the build evaluated.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeship.calibration.datasets import evaluation_samples
from edgeship.errors import EdgeshipError, first_line
from edgeship.profile import Profile
from edgeship.results import Results
from edgeship.spec import ModelSpec

SAMPLE_FILE = "sample.bin"


@dataclass
class Sample:
    """The first batch of the evaluation samples: one array per input, and what model.json says of it."""

    arrays: dict[str, np.ndarray]
    source: str

    def data(self) -> bytes:
        """sample.bin: every input's bytes, little-endian, in input order."""
        return b"".join(_little_endian(a).tobytes() for a in self.arrays.values())

    def described(self) -> dict[str, Any]:
        """model.json's ``sample``: the file, each input's dtype, shape, byte offset and length, and the source."""
        inputs, offset = [], 0
        for name, array in self.arrays.items():
            inputs.append({"name": name, "dtype": str(array.dtype), "shape": list(array.shape), "offset": offset,
                           "bytes": array.nbytes})
            offset += array.nbytes
        return {"file": SAMPLE_FILE, "inputs": inputs, "source": self.source,
                "note": "one batch of the build's evaluation inputs, model-ready (no preprocessing applies)"}


def evaluation_sample(profile: Profile, spec: ModelSpec, results: Results, warnings: list[str]) -> Sample | None:
    """The first batch (the spec's batch size) of the evaluation samples the build ran; None when the data
    cannot be read now. Appends to ``warnings`` why there is none, or that it is not the build's."""
    try:
        data = evaluation_samples(profile.data.evaluation or spec.data.evaluation, spec, profile.evaluation)
    except EdgeshipError as e:
        warnings.append(f"no sample.bin: the evaluation data cannot be read now ({first_line(e)})")
        return None
    batch = int(spec.inputs[0].shape[0])
    index = np.arange(batch) % len(data)  # fewer samples than a batch: repeated, as the runners pad
    arrays = {inp.name: np.ascontiguousarray(data.inputs[inp.name][index]) for inp in spec.inputs}
    source = profile.data.evaluation or spec.data.evaluation
    described = Path(str(source)).name if source else data.source  # no path of the build machine in a bundle
    sample = Sample(arrays, f"the first {batch} of the build's {len(data)} evaluation sample(s), from {described}")
    measured = {lat.inputs_sha256 for row in results.variants for lat in row.latency
                if lat.size is None and lat.inputs_sha256}
    if measured and data.inputs_sha256() not in measured:
        warnings.append(f"sample.bin: {sample.source}: differs from the evaluation inputs the build measured "
                        "(the data changed since the build), so it is not a sample the build evaluated")
    return sample


def _little_endian(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
