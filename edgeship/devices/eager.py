"""The eager runtime: the float PyTorch module itself, timed by the device runner on the host.

    python -m edgeship.devices.eager JOB.json

Host only: loading the module needs edgeship and the model's source, so this runner is not in
runner.py (which devices run alone, importing nothing of edgeship). It registers itself in
runner.py's RUNNERS and runs jobs with runner.py's ``main``; ``open_runner`` imported from here
knows every runtime, eager included.
"""
from __future__ import annotations

import sys

from edgeship.devices.runner import Runner, TorchRunner, main, open_runner
from edgeship.results import REFERENCE

__all__ = ["EagerRunner", "Runner", "main", "open_runner"]


class EagerRunner(TorchRunner):
    """The float module built from the job's model spec (options: spec, base_dir, trust_weights),
    by the build's own ``load_model``: seeded from the spec's ``seed``, so a model without weights
    file gets the same random weights here as in the build (its eager row checks it)."""

    runtime = REFERENCE
    imports = ("torch", "edgeship.model")

    def load(self) -> None:
        from edgeship.model import load_model
        from edgeship.spec import ModelSpec

        self.set_threads()
        # Relative paths start at the spec's folder, as in the build: the runner's working folder is its job's.
        spec = ModelSpec.model_validate(self.options["spec"], context={"base_dir": self.options["base_dir"]})
        spec.base_dir = self.options["base_dir"]
        self.use(load_model(spec, trust_weights=self.options.get("trust_weights", False)).module)


if __name__ == "__main__":
    sys.exit(main())
