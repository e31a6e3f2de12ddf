"""The results store: rows per (variant, device), filters, idempotent recording, URLs."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgeship.errors import StoreError
from edgeship.results import Accuracy, Latency, ModelInfo, Results, VariantResult
from edgeship.store import ResultsStore

INTERFACE_KEYS = {"build_id", "created", "target", "model", "variant", "backend", "precision", "quantization",
                  "artifact_sha256", "size_bytes", "device", "runtime", "threads", "p50_ms", "p90_ms",
                  "p99_ms", "mean_ms", "cv", "top1", "top1_drop", "sqnr_db", "agreement"}


def _latency(device: str, p50: float | None, measured_at: str = "2026-01-01T00:00:00Z") -> Latency:
    numbers = {} if p50 is None else {"p50_ms": p50, "p90_ms": p50 * 1.1, "p99_ms": p50 * 1.2,
                                       "mean_ms": p50, "cv": 0.05}
    accuracy = None if p50 is None else Accuracy(samples=8, top1=0.75, top1_drop=0.0, agreement=1.0, sqnr_db=90.0)
    notes = ["not measured: connection lost"] if p50 is None else []
    return Latency(device=device, runtime="onnxruntime 1.32.0", threads=1, warmup=1, iterations=5,
                   measured_at=measured_at, accuracy=accuracy, notes=notes, **numbers)


def _results(model: str = "tiny", target: str = "host", latency: list[Latency] | None = None) -> Results:
    measured = VariantResult(name="ort", backend="onnx", precision="fp32", sha256="a" * 64, size_bytes=1234,
                             latency=latency if latency is not None else [_latency("host", 1.5),
                                                                          _latency("board", None)])
    failed = VariantResult(name="broken", backend="executorch", precision="fp32", error="lowering failed: x")
    return Results(target=target, created="2026-01-01T00:00:00Z",
                   model=ModelInfo(name=model, entry="m:build", inputs=[], params=1),
                   toolchain={"python": "3.11"}, variants=[measured, failed])


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    return ResultsStore(f"sqlite:///{tmp_path / 'db' / 'results.db'}")


def test_store_rows_have_the_interface_keys_and_the_build_id(store) -> None:
    build_id = store.record(_results(), build_id="b1")
    rows = store.rows()
    assert build_id == "b1" and len(rows) == 3
    assert all(INTERFACE_KEYS <= set(r) and r["build_id"] == "b1" for r in rows)
    host = next(r for r in rows if r["device"] == "host")
    assert host["p50_ms"] == 1.5 and host["sqnr_db"] == 90.0 and host["artifact_sha256"] == "a" * 64
    assert host["size_bytes"] == 1234 and host["runtime"] == "onnxruntime 1.32.0" and host["notes"] == []


def test_store_failed_measurement_row_has_notes_and_no_numbers(store) -> None:
    store.record(_results())
    board = store.rows(device="board")
    assert len(board) == 1 and board[0]["notes"] == ["not measured: connection lost"]
    assert all(board[0][k] is None for k in ("p50_ms", "mean_ms", "cv", "sqnr_db", "agreement"))


def test_store_variant_without_measurement_gets_one_deviceless_row_with_the_reason(store) -> None:
    store.record(_results())
    broken = [r for r in store.rows() if r["variant"] == "broken"]
    assert len(broken) == 1 and broken[0]["device"] is None and broken[0]["notes"] == ["lowering failed: x"]


def test_store_rows_filter_by_model_target_and_device(store) -> None:
    store.record(_results("tiny", "host"))
    store.record(_results("other", "jetson", [_latency("orin", 3.0, "2026-01-02T00:00:00Z")]))
    assert {r["model"] for r in store.rows(model="other")} == {"other"}
    assert {r["device"] for r in store.rows(target="jetson")} == {"orin", None}
    assert [r["p50_ms"] for r in store.rows(device="orin")] == [3.0]


def test_store_record_does_not_store_a_reused_measurement_twice(store) -> None:
    store.record(_results(), build_id="first")
    later = _latency("host", 2.0, "2026-01-03T00:00:00Z")
    second = store.record(_results(latency=[_latency("host", 1.5), later]))
    host = store.rows(device="host")
    assert [(r["build_id"], r["p50_ms"]) for r in host] == [("first", 1.5), (second, 2.0)]


def test_store_keeps_rows_across_instances(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    ResultsStore(url).record(_results())
    assert len(ResultsStore(url).rows()) == 3


def test_store_url_comes_from_the_environment_else_artifacts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EDGESHIP_DB", raising=False)  # conftest points every other test at the session's tmp
    ResultsStore().record(_results())
    assert (tmp_path / "artifacts" / "results.db").is_file()
    monkeypatch.setenv("EDGESHIP_DB", f"sqlite:///{tmp_path / 'team.db'}")
    assert ResultsStore().url.endswith("team.db")


@pytest.mark.parametrize("url", ["not a url", "nosuchdialect://x/y"])
def test_store_bad_url_raises_store_error_naming_it(url: str) -> None:
    with pytest.raises(StoreError, match="results database"):
        ResultsStore(url)


def test_store_record_of_a_build_id_already_stored_stores_nothing(store) -> None:
    store.record(_results(), build_id="b1")
    again = store.record(_results(), build_id="b1")
    assert again == "b1" and len(store.rows()) == 3


def test_store_locked_database_is_a_store_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    store = ResultsStore(f"sqlite:///{path}?timeout=0.1")
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match=rf"results database sqlite:///{path}.*: could not record build b1: "
                                             r".*database is locked"):
            store.record(_results(), build_id="b1")
        with pytest.raises(StoreError, match="cannot read it: .*database is locked"):
            store.rows()
    finally:
        lock.rollback()
        lock.close()
    assert store.record(_results(), build_id="b1") == "b1" and len(store.rows()) == 3


def test_store_display_url_hides_the_password() -> None:
    assert ResultsStore.__dict__["display_url"].fget(SimpleNamespace(url="postgresql://u:secret@h/db")) == \
        "postgresql://u:***@h/db"


@pytest.mark.parametrize("url", ["postgresql+psycopg://u:S3cretPW@h:notaport/db", "u:S3cretPW@h/db",
                                 "postgres ql://u:S3cretPW@h/db", "nosuchdialect://u:S3cretPW@h/db"])
def test_a_url_that_cannot_be_used_is_a_store_error_without_its_password(url: str) -> None:
    with pytest.raises(StoreError) as refused:
        ResultsStore(url)
    assert "S3cretPW" not in str(refused.value) and "u:***@h" in str(refused.value)


@pytest.mark.parametrize("where", ["parent-is-a-file", "nul-byte"])
def test_store_unusable_sqlite_path_is_a_store_error_naming_it(tmp_path: Path, where: str) -> None:
    (tmp_path / "afile").write_text("user data")
    url = f"sqlite:///{tmp_path}/afile/x.db" if where == "parent-is-a-file" else f"sqlite:///{tmp_path}/a\0b/x.db"
    with pytest.raises(StoreError, match="results database sqlite:///"):
        ResultsStore(url)
    assert (tmp_path / "afile").read_text() == "user data"
