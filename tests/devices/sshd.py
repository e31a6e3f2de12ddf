"""A throwaway OpenSSH server on 127.0.0.1 for tests and benchmarks: real sshd, real keys.

Host key and client key are made with ssh-keygen in a temporary folder; the client key is
authorized for the current user; known_hosts holds the host key, so the client checks it as it
would on a real device. Running as root (CI) logs in as root with a key only.
"""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def missing() -> str | None:
    """Why no throwaway sshd can start here, or None."""
    absent = [name for name, path in (("sshd", SSHD), ("ssh", shutil.which("ssh")),
                                      ("ssh-keygen", shutil.which("ssh-keygen")))
              if not path or not os.path.exists(path)]
    if absent:
        return (f"OpenSSH not installed here ({', '.join(absent)} missing); .ci/run installs openssh-server and "
                "openssh-client with apt-get")
    return None


@dataclass
class Sshd:
    """A running sshd and what a devices.toml needs to reach it."""

    folder: Path
    port: int
    user: str
    identity: Path
    known_hosts: Path
    process: subprocess.Popen

    def device_toml(self, name: str, python: str = sys.executable, **extra: object) -> str:
        """A [devices.NAME] table for this server; ``extra`` adds or overrides keys."""
        fields = {"transport": "ssh", "host": "127.0.0.1", "port": self.port, "user": self.user,
                  "identity": str(self.identity), "known_hosts": str(self.known_hosts), "python": python,
                  "workdir": str(self.folder / "remote"), "connect_timeout_s": 5, **extra}
        body = "\n".join(f"{k} = {v!r}" if isinstance(v, (int, float)) else f'{k} = "{v}"'
                         for k, v in fields.items())
        return f"[devices.{name}]\n{body}\n"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgeship-test", "-f", str(path)],
                   check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(folder: Path, port: int, extra: str = "") -> Path:
    path = folder / "sshd_config"
    path.write_text(textwrap.dedent(f"""\
        Port {port}
        ListenAddress 127.0.0.1
        HostKey {folder / 'host_key'}
        PidFile {folder / 'sshd.pid'}
        AuthorizedKeysFile {folder / 'authorized_keys'}
        PubkeyAuthentication yes
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        PermitRootLogin prohibit-password
        StrictModes no
        UsePAM no
        LogLevel ERROR
        """) + extra)
    return path


def start(folder: Path, timeout_s: float = 15.0, extra_config: str = "") -> Sshd:
    """Start sshd -D on a free port of 127.0.0.1 with fresh keys under ``folder`` (``extra_config``:
    sshd_config lines added, e.g. a ForceCommand)."""
    folder.mkdir(parents=True, exist_ok=True)
    _keygen(folder / "host_key")
    _keygen(folder / "client_key")
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    port = _free_port()
    host_key = (folder / "host_key.pub").read_text().split()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    log = open(folder / "sshd.log", "w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(_config(folder, port, extra_config))], stdout=log, stderr=log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {(folder / 'sshd.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return Sshd(folder, port, getpass.getuser(), folder / "client_key", folder / "known_hosts", proc)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port} within {timeout_s} s")
