"""The local Ray cluster ``edgeship matrix --ray auto`` starts when it is given no cluster: reachable
only from this machine, only with this run's token, and gone when the run ends.

- **Loopback.** Ray 2.60 binds every server of a node (GCS, the raylet's node and object managers,
  each worker's gRPC server, the runtime-env agent) to the node's IP, and on Linux it swaps a
  loopback node IP for the machine's routable address, so every one listens on all interfaces,
  unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: the one-machine mode Ray uses by default on macOS
  and Windows, where the node IP is 127.0.0.1. No dashboard: its head process and agent then open
  no port.
- **Token.** Loopback still lets every user of the machine in, so the cluster takes Ray's token
  authentication (``RAY_AUTH_MODE=token``, set even where the user's environment disables it) with a
  token made for this run (``secrets``, 256 bits) that lives only in the environment of the run's
  processes (``RAY_AUTH_TOKEN``). Ray's own default for ``ray.init`` keeps one token for every
  cluster of the user, written to ``~/.ray/auth_token`` with mode 0644.
- **Private session folder.** Ray's sockets, logs, spilled objects and runtime environments go to
  a fresh 0700 folder, not the shared ``/tmp/ray``, whose folders Ray makes writable by everyone.
- **No working folder on the workers' path.** ``ray.init`` puts the driver's working folder on every
  worker's ``sys.path``, ahead of the standard library and site-packages, so a ``platform.py`` left
  where the command was started would run in each build task: the driver starts Ray from an empty
  folder of its own that lives as long as the cluster (the raylet and the workers it spawns keep it as
  their working folder), for a lab cluster too.

The environment and Ray's settings read from it are restored when the cluster stops.
"""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from edgeship.errors import EdgeshipError, first_line
from edgeship.fsutil import working_folder

LOOPBACK = "127.0.0.1"
ONE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # Ray's switch for a node IP of 127.0.0.1
SETTINGS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", ONE_MACHINE)


class LocalClusterError(EdgeshipError):
    """The local Ray cluster could not be started private to this run (exit 1: the environment)."""


@contextmanager
def local_cluster(resources: dict[str, float]) -> Iterator[None]:
    """A local Ray cluster for the block, owning ``resources`` (see the module docstring); this
    process is its driver. Stopped, and its session folder removed, when the block ends."""
    import ray

    saved = {name: os.environ.get(name) for name in SETTINGS}
    folder = tempfile.mkdtemp(prefix="edgeship-ray-")  # 0700, a new name; Ray makes its own folder 0777
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), ONE_MACHINE: "0"})
    try:
        reload_ray_settings()
        try:
            os.mkdir(f"{folder}/cwd")
            with working_folder(f"{folder}/cwd"):  # see the module docstring
                ray.init(resources=resources, include_dashboard=False, _temp_dir=f"{folder}/ray",
                         logging_level="ERROR", log_to_driver=False)
        except (OSError, RuntimeError, ValueError) as e:  # OSError: a socket path too long under $TMPDIR
            raise LocalClusterError(f"cannot start a local Ray cluster: {first_line(e)}") from None
        where = ray.util.get_node_ip_address()
        if where != LOOPBACK:
            raise LocalClusterError(f"the local Ray cluster came up on {where}, not on {LOOPBACK} only (Ray "
                                    f"{ray.__version__} no longer honours {ONE_MACHINE}=0); it was stopped")
        yield
    finally:
        ray.shutdown()
        restore(saved)
        reload_ray_settings()
        shutil.rmtree(folder, ignore_errors=True)




def restore(saved: dict[str, str | None]) -> None:
    """The environment variables ``saved`` back as they were (absent where they were)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def reload_ray_settings() -> None:
    """Ray's settings read again from the environment. Quirk: Ray reads the one-machine switch once,
    when ``ray`` is imported, and caches the authentication mode and token in its C++ config; a
    process that imported Ray before (the Python API, the tests) would start the cluster with the
    old ones while the processes it spawns read the new environment."""
    from ray._private import ray_constants
    from ray._raylet import AuthenticationTokenLoader, Config

    ray_constants.ENABLE_RAY_CLUSTER = ray_constants.env_bool(ONE_MACHINE, not ray_constants.IS_WINDOWS_OR_OSX)
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
