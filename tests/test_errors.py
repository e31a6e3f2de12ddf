"""Error helpers: one line of an error for messages and reports."""
from __future__ import annotations

from edgeship.errors import first_line


def test_first_line_is_the_first_non_empty_line_of_the_message() -> None:
    assert first_line(ValueError("\n  shape mismatch  \nat layer 3")) == "shape mismatch"


def test_first_line_of_an_empty_message_is_the_type_name() -> None:
    assert first_line(AssertionError()) == "AssertionError"
    assert first_line(RuntimeError("  \n ")) == "RuntimeError"
