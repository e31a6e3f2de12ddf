"""The native benchmark programs as devices/native.py finds them: each backend's declared program,
its class from the backend's native.py. The programs' own command lines and parsers are tested
beside their backends (tests/backends/<name>/test_native.py), with the helpers here.

The recorded outputs under tests/fixtures/native/ were printed by the real programs on real
devices and published (each file names its source); none was produced here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.backends.registry import SPECS
from edgeship.devices import Job
from edgeship.devices.native import PROGRAMS, NativeProgram, declared_programs

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "native"


def recorded(name: str) -> str:
    """A recorded output without its provenance header (the lines up to '# ---')."""
    text = (FIXTURES / name).read_text()
    return text.split("# ---\n", 1)[1]


def job(tmp_path: Path, warmup: int = 3, iterations: int = 20, threads: int | None = 2) -> Job:
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, image=np.zeros((5, 3, 16, 16), np.float32), mask=np.zeros((5, 7), np.int64))
    return Job(runtime="executorch", artifact=tmp_path / "m.pte", sha256=None, inputs=inputs,
               input_names=["image", "mask"], batch=1, warmup=warmup, iterations=iterations, threads=threads,
               timeout_s=60)


def test_native_programs_are_the_ones_the_backends_declare() -> None:
    declared = {spec.runtime: spec.native_program for spec in SPECS.values() if spec.native_program}
    assert declared and declared_programs() == declared and sorted(PROGRAMS) == sorted(declared)
    for runtime, program in declared.items():
        assert isinstance(PROGRAMS[runtime], NativeProgram) and PROGRAMS[runtime].program == program


def test_native_programs_name_no_program_for_a_runtime_without_one() -> None:
    undeclared = [spec.runtime for spec in SPECS.values() if not spec.native_program]
    assert undeclared and not set(undeclared) & set(PROGRAMS)
    with pytest.raises(KeyError):
        PROGRAMS[undeclared[0]]
