"""executorch: XNNPACK-delegated and portable .pte programs run in the ExecuTorch runtime."""
from __future__ import annotations

from edgeship.backends.base import LowerRequest
from edgeship.backends.registry import BACKENDS
from edgeship.lowering.capture import Capturer
from edgeship.profile import Variant
from tests.lowering.conftest import sqnr_against_eager


def test_executorch_xnnpack_fp32_matches_eager_and_reports_delegation(lower, tiny_model) -> None:
    artifact, predict = lower("executorch", "export", partitioner="xnnpack")
    assert artifact.path.read_bytes()[4:8] == b"ET12"  # the .pte flatbuffer identifier
    assert artifact.details["delegated_nodes"] > 0 and artifact.details["delegated_subgraphs"] >= 1
    assert sqnr_against_eager(tiny_model, predict) >= 60


def test_executorch_portable_delegates_nothing(lower, tiny_model) -> None:
    artifact, predict = lower("executorch", "export", partitioner="portable")
    assert artifact.details["delegated_nodes"] == 0 and artifact.details["non_delegated_ops"]
    assert sqnr_against_eager(tiny_model, predict) >= 60


def test_executorch_coreml_delegate_lowers_here_but_runs_only_on_apple(tiny_model) -> None:
    backend = BACKENDS["executorch"]
    options = {"partitioner": "coreml"}
    variant = Variant(name="et-coreml", backend="executorch", precision="fp16", options=options)
    parsed = backend.parse_options(options)
    dest = tiny_model.spec.base_dir / "et-coreml" / "model.pte"
    artifact = backend.lower(LowerRequest(Capturer(tiny_model).get("export"), variant, parsed, dest))
    assert artifact.details["delegated_nodes"] > 0 and artifact.path.stat().st_size > 0
    assert "Apple" in backend.available(parsed)


def test_executorch_fp16_without_the_coreml_partitioner_is_a_plan_error() -> None:
    problems = BACKENDS["executorch"].variant_problems("fp16", {"partitioner": "xnnpack"})
    assert problems and 'partitioner = "coreml"' in problems[0]


def test_the_runner_loads_a_pte_through_the_binding_alone_with_the_public_apis_outputs(lower, tiny_model,
                                                                                      tmp_path) -> None:
    """The device runner loads a .pte without executorch.exir (the compiler, which the public wrapper
    imports first: 25 s against 6 s for torch and the binding here, 41 s more under qemu-aarch64), and
    gets what executorch.runtime gets for the same file."""
    import json
    import subprocess
    import sys

    import numpy as np
    import torch

    from edgeship.devices.base import device_folder

    artifact, predict = lower("executorch", "export", partitioner="xnnpack")
    x = torch.rand(1, *tiny_model.spec.inputs[0].shape[1:], generator=torch.Generator().manual_seed(3)).numpy()
    np.save(tmp_path / "x.npy", x)
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import numpy as np, runner; "
            "r = runner.open_runner('executorch', sys.argv[2], threads=1); out = r.infer([np.load(sys.argv[3])]); "
            "np.save(sys.argv[4], out[0]); print(json.dumps({'exir': 'executorch.exir' in sys.modules, "
            "'version': r.version}))")
    proc = subprocess.run([sys.executable, "-c", code, str(device_folder()), str(artifact.path),
                           str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert doc == {"exir": False, "version": doc["version"]} and doc["version"].startswith("executorch 1.")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), predict([x])[0])
