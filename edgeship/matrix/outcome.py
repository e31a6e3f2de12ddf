"""How one build of a matrix run went (``CellResult``), as run.py makes it and report.py reads it."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CellResult:
    """How one build of the matrix went."""

    model: str
    target: str
    folder: str                   # under --out: <target>/<model>
    state: str                    # done | gates failed | failed
    seconds: float
    error: str | None = None
    node: str | None = None       # where it was built (hostname, and the Ray node on a cluster)
    timings: dict[str, float] = field(default_factory=dict)  # build, transfer (Ray), unpack
