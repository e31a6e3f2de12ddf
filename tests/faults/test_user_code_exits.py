"""User code that exits (SystemExit, or another BaseException that is not an interrupt) from each
place a build runs it: a real `edgeship build` subprocess must end with exit 2 and one message
naming the step, never with the exit status the user code chose, never with a traceback, and
nothing published into --out."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import make_tiny_project, write_profile

ONNX_ONLY = """
[[variants]]
name = "onnx-fp32"
backend = "onnx"
precision = "fp32"
"""

EXITING = textwrap.dedent('''
    import sys as _sys


    class Halt(BaseException):
        """Not an Exception: a user's own BaseException."""


    def exiting_build():
        _sys.exit(0)


    class _Exits(TinyNet):
        def forward(self, x):
            _sys.exit(0)


    def exiting_forward():
        return _Exits()


    def halting_build():
        raise Halt("stop here")


    def exiting_data():
        _sys.exit(4)


    class _ExitsWhenExported(TinyNet):
        def forward(self, x):
            import torch

            if torch.compiler.is_exporting():
                _sys.exit(3)
            return super().forward(x)


    def exiting_when_exported():
        return _ExitsWhenExported()
    ''')

# where: (how model.toml or tinynet.py is changed, the step the message must name)
CASES = {
    "module import": (lambda p: _append(p / "tinynet.py", "\n_sys.exit(0)\n"),
                      "evaluation data + float reference", "called sys.exit(0)"),
    "entry callable": (lambda p: _entry(p, "tinynet:exiting_build"), "evaluation data + float reference",
                       "called sys.exit(0)"),
    "forward": (lambda p: _entry(p, "tinynet:exiting_forward"), "evaluation data + float reference",
                "called sys.exit(0)"),
    "own BaseException": (lambda p: _entry(p, "tinynet:halting_build"), "evaluation data + float reference",
                          "raised Halt (stop here)"),
    "evaluation source": (lambda p: _data(p, "evaluation"), "evaluation data + float reference",
                          "called sys.exit(4)"),
    "calibration source": (lambda p: _data(p, "calibration"), "calibration data", "called sys.exit(4)"),
    "forward, while exported": (lambda p: _entry(p, "tinynet:exiting_when_exported"), "lower onnx-fp32 (onnx fp32)",
                                "called sys.exit(3)"),
}


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def _entry(project: Path, entry: str) -> None:
    toml = project / "model.toml"
    toml.write_text(toml.read_text().replace('entry = "tinynet:build"', f'entry = "{entry}"'))


def _data(project: Path, kind: str) -> None:
    toml = project / "model.toml"
    toml.write_text(toml.read_text().replace(f'{kind} = "{"calib" if kind == "calibration" else "eval"}.npz"',
                                             f'{kind} = "tinynet:exiting_data"'))


@pytest.mark.parametrize("where", list(CASES))
def test_faults_user_code_that_exits_is_a_model_error_exit_2_naming_the_step(where, tmp_path) -> None:
    project = make_tiny_project(tmp_path / "project")
    _append(project / "tinynet.py", EXITING)
    change, step, what = CASES[where]
    change(project)
    profile = write_profile(tmp_path, ONNX_ONLY.replace("onnx-fp32", "onnx-int8").replace("fp32", "int8")
                            if "calibration" in step else ONNX_ONLY)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
                           str(project / "model.toml"), "--out", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert f"edgeship: error: user code {what} during the step '{step}'" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (out / "results.json").exists()
