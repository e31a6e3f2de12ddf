"""Which operators a static int8 quantizer quantizes: every one its backend's quantizer takes, or
only the weighted layers (convolutions and matrix multiplications).

A quantizer's default is every operator it knows (additions, multiplications, concatenation,
pooling, often softmax and layer normalization too). For convolutional networks that keeps whole
blocks in int8. For a trained transformer it is ruinous: the residual stream and the layer-norm
inputs carry outliers hundreds of times the typical value, and one scale per tensor crushes the
rest (on all-MiniLM-L6-v2 the mean cosine to float fell to 0.37 with one runtime's default set and
rose to 0.94 with the matrix multiplications only; docs/ARCHITECTURE.md, "Which operators", gives
every backend's figures). So ``operators = "auto"`` quantizes only
the weighted layers of a graph with attention and layer normalization, and everything the
backend's quantizer takes otherwise, and says which it chose and why.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ATTENTION = ("softmax", "scaled_dot_product_attention", "multiheadattention", "attention")
LAYER_NORM = ("layernormalization", "layer_norm", "layernorm", "mvn", "groupnorm_layer")


@dataclass(frozen=True)
class Scope:
    """The operators chosen: ``weighted`` (True: weighted layers only) and why."""

    weighted: bool
    reason: str

    def details(self) -> dict[str, object]:
        return {"operators": "weighted" if self.weighted else "all", "operators_reason": self.reason}


def transformer_evidence(ops: Iterable[str]) -> tuple[str, str] | None:
    """The (attention, layer-norm) operator names that mark a graph as a transformer's, or None.
    ``ops`` are the graph's operator names in the backend's own spelling (a serialized graph's
    op types, aten targets, a scripted graph's node kinds, module class names)."""
    names = sorted(set(ops))
    attention = next((n for n in names if any(a in n.lower().replace(".", "_") for a in ATTENTION)), None)
    norm = next((n for n in names if any(a in n.lower().replace(".", "_") for a in LAYER_NORM)), None)
    return (attention, norm) if attention and norm else None


def choose_scope(asked: str, ops: Iterable[str], quantizer: str) -> Scope:
    """``asked`` ("auto", "all" or "weighted") resolved for a graph whose operators are ``ops``."""
    if asked == "all":
        return Scope(False, f"every operator {quantizer} quantizes (operators = \"all\")")
    if asked == "weighted":
        return Scope(True, "weighted layers only (operators = \"weighted\")")
    found = transformer_evidence(ops)
    if found is None:
        return Scope(False, f"every operator {quantizer} quantizes: the graph has no attention with layer "
                            "normalization (operators = \"auto\")")
    return Scope(True, f"weighted layers only: the graph has attention ({found[0]}) and layer normalization "
                       f"({found[1]}), whose residual and normalization inputs one int8 scale per tensor cannot "
                       "hold (operators = \"auto\"; \"all\" quantizes everything)")
