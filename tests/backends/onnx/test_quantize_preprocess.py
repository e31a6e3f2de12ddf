"""ONNX Runtime's pre-processing: a graph its symbolic shape inference cannot follow is pre-processed
without it (with a note), and what ORT dumps on that failure stays out of the user's folder."""
from __future__ import annotations

import os
from pathlib import Path

from edgeship.backends.onnx import quantize as qonnx


def test_preprocess_falls_back_without_symbolic_inference_and_leaves_the_cwd_clean(tmp_path, monkeypatch) -> None:
    import onnxruntime.quantization.shape_inference as shape_inference

    calls = []

    def fake(src: str, dest: str, skip_symbolic_shape: bool = False) -> None:
        calls.append(skip_symbolic_shape)
        if not skip_symbolic_shape:  # what ORT does: dump the half-inferred model into the cwd, then raise
            Path("sym_shape_infer_temp.onnx").write_bytes(b"x")
            raise Exception("Incomplete symbolic shape inference")
        Path(dest).write_bytes(b"model")

    monkeypatch.setattr(shape_inference, "quant_pre_process", fake)
    user, work = tmp_path / "user", tmp_path / "work"
    user.mkdir(), work.mkdir()
    monkeypatch.chdir(user)
    notes: list[str] = []
    out = qonnx.preprocess(Path("m.onnx"), work / "pre.onnx", notes)
    assert calls == [False, True] and out.read_bytes() == b"model"
    assert os.listdir(user) == [] and Path.cwd() == user
    assert notes == ["ONNX Runtime's symbolic shape inference cannot follow this graph (data-dependent shapes); "
                     "pre-processed with ONNX shape inference only"]
