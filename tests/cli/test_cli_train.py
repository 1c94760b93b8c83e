"""``bpe-store train``: progress output, several inputs, continuing to a larger vocabulary."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, json_lines, run, run_sub
from conftest import SMALL_TEXT

from bpe_store.inspection.progress import JsonLines, Meter
from bpe_store.store.store import Store
from bpe_store.training.train import read_result


def corpus() -> Path:
    return SMALL_TEXT


def merges_of(db: Path) -> list[tuple[bytes, bytes]]:
    with Store.open(db, readonly=True) as store:
        return read_result(store).merges


def test_train_then_rerun_is_a_no_op(tmp_path):
    db = tmp_path / "r.db"
    args = ["train", corpus(), "--db", db, "--vocab-size", "320", "--special", SPECIAL, "--progress", "none"]
    first = run(*args)
    assert first.exit_code == 0, first.output
    assert f"{db}: 63 merges, vocab 320 (reached the vocabulary size)" in first.stderr
    again = run(*args)
    assert again.exit_code == 0 and "63 merges" in again.stderr
    assert len(merges_of(db)) == 63


def test_quiet_prints_nothing(tmp_path):
    r = run("train", corpus(), "--db", tmp_path / "r.db", "--vocab-size", "300", "--quiet")
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""


def test_continue_to_a_larger_vocab_equals_training_to_it_at_once(tmp_path):
    grown, direct = tmp_path / "grown.db", tmp_path / "direct.db"
    base = ["--special", SPECIAL, "--quiet"]
    assert run("train", corpus(), "--db", grown, "--vocab-size", "400", *base).exit_code == 0
    assert run("train", corpus(), "--db", grown, "--vocab-size", "520", *base).exit_code == 0
    assert run("train", corpus(), "--db", direct, "--vocab-size", "520", *base).exit_code == 0
    assert len(merges_of(grown)) == 520 - 257
    assert merges_of(grown) == merges_of(direct)


def test_a_smaller_vocab_is_refused_and_points_to_export(tmp_path):
    db = tmp_path / "r.db"
    assert run("train", corpus(), "--db", db, "--vocab-size", "400", "--quiet").exit_code == 0
    before = db.read_bytes()
    r = run("train", corpus(), "--db", db, "--vocab-size", "350", "--quiet")
    assert r.exit_code == 3
    assert "export --vocab-size 350" in r.stderr and r.stderr.count("\n") == 1
    assert len(merges_of(db)) == 400 - 256 and db.read_bytes() == before


def test_other_parameters_are_refused_with_exit_3(tmp_path):
    db = tmp_path / "r.db"
    assert run("train", corpus(), "--db", db, "--vocab-size", "300", "--quiet").exit_code == 0
    r = run("train", corpus(), "--db", db, "--vocab-size", "300", "--special", SPECIAL, "--quiet")
    assert r.exit_code == 3 and "special tokens" in r.stderr and "--restart" in r.stderr


def test_several_files_directories_and_globs_are_recorded(tmp_path):
    text = corpus().read_bytes()
    data = tmp_path / "data"
    (data / "more").mkdir(parents=True)
    parts = [text[: len(text) // 3], text[len(text) // 3: 2 * len(text) // 3], text[2 * len(text) // 3:]]
    for name, part in zip(("b.txt", "a.txt", "more/c.txt"), parts):
        (data / name).write_bytes(part)
    (data / "notes.md").write_text("not a corpus")
    db = tmp_path / "r.db"
    r = run("train", data, "--glob", "**/*.txt", "--db", db, "--vocab-size", "300", "--special", SPECIAL, "--quiet")
    assert r.exit_code == 0, r.output
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT path, size, digest FROM sources ORDER BY id").fetchall()
        assert {h for (h,) in con.execute("SELECT hash FROM sources")} == {"xxh3_128_units"}
    assert [Path(p).relative_to(data).as_posix() for p, _, _ in rows] == ["a.txt", "b.txt", "more/c.txt"]
    assert [s for _, s, _ in rows] == [len(parts[1]), len(parts[0]), len(parts[2])]
    assert all(len(h) == 32 for _, _, h in rows)
    # the same inputs given as a quoted glob plus a file resume the same run
    again = run("train", str(data / "[ab].txt"), data / "more" / "c.txt", "--db", db, "--vocab-size", "300",
                "--special", SPECIAL, "--quiet")
    assert again.exit_code == 0, again.output


def test_json_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    out = run_sub("train", str(corpus()), "--db", str(tmp_path / "r.db"), "--vocab-size", "400",
                  "--special", SPECIAL, "--checkpoint-merges", "50")
    assert out.returncode == 0, out.stderr
    events = json_lines(out.stderr)
    assert len(events) == len(out.stderr.splitlines())  # every line is JSON
    for e in events:
        assert {"stage", "done", "total", "eta_s"} <= set(e)
    stages = [e["stage"] for e in events]
    assert stages[0] == "plan" and stages[-1] == "done"
    assert {"counting", "pairs", "merging", "checkpoint"} <= set(stages)
    counting = [e for e in events if e["stage"] == "counting"]
    assert counting[-1]["done"] == counting[-1]["total"] == corpus().stat().st_size
    merging = [e for e in events if e["stage"] == "merging"]
    assert merging[-1]["done"] == merging[-1]["total"] == 400 - 257
    left, right, count = merging[0]["merge"]
    assert isinstance(left, str) and isinstance(right, str) and count > 0
    assert all(e["unit"] == "merges" for e in merging)
    checkpoints = [e for e in events if e["stage"] == "checkpoint" and e["phase"] == "merging"]
    # JSON lines are rate-limited: a checkpoint a newer one replaced within JSON_INTERVAL_S is not said
    done = [e["done"] for e in checkpoints]
    assert done[-1] == 143 and done == sorted(done) and set(done) <= {50, 100, 143}
    assert events[-1] == {**events[-1], "merges": 143, "vocab_size": 400, "stop_reason": "vocab_size"}


def test_progress_json_option_and_none(tmp_path):
    as_json = run("train", corpus(), "--db", tmp_path / "j.db", "--vocab-size", "300", "--progress", "json")
    assert as_json.exit_code == 0
    assert json_lines(as_json.stderr)[-1]["stage"] == "done"
    plain = run("train", corpus(), "--db", tmp_path / "n.db", "--vocab-size", "300", "--progress", "none")
    assert plain.exit_code == 0
    assert plain.stderr.splitlines() == [f"{tmp_path / 'n.db'}: 44 merges, vocab 300 (reached the vocabulary size)"]


def test_meter_speed_and_eta():
    m = Meter(window_s=10)
    assert m.rate() is None and m.eta(0, 100) is None
    m.add(0.0, 0)
    m.add(2.0, 20)
    assert m.rate() == pytest.approx(10.0)
    assert m.eta(20, 100) == pytest.approx(8.0)
    assert m.eta(100, 100) == 0.0 and m.eta(5, None) is None
    for t in range(3, 40):
        m.add(float(t), 20 + 5 * (t - 2))
    assert m.rate() == pytest.approx(5.0)  # the old, faster pace has left the window


def test_json_lines_reporter_adds_eta(tmp_path):
    clock = iter([0.0, 0.0, 1.0, 2.0]).__next__
    out = tmp_path / "log"
    with open(out, "w") as f:
        rep = JsonLines(f, clock=clock)
        rep({"stage": "merging", "done": 0, "total": 30, "merge": ["a", "b", 9]})
        rep({"stage": "merging", "done": 10, "total": 30, "merge": ["c", "d", 7]})
        rep({"stage": "checkpoint", "phase": "merging", "done": 10, "total": 30})
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["eta_s"] is None
    assert lines[1]["eta_s"] == 2.0 and lines[1]["rate"] == 10.0 and lines[1]["merge"] == ["c", "d", 7]
    assert lines[2]["stage"] == "checkpoint" and lines[2]["eta_s"] == 2.0


def test_restart_starts_over_with_other_parameters(tmp_path):
    db = tmp_path / "r.db"
    assert run("train", corpus(), "--db", db, "--vocab-size", "300", "--quiet").exit_code == 0
    r = run("train", corpus(), "--db", db, "--vocab-size", "300", "--special", SPECIAL, "--restart", "--quiet")
    assert r.exit_code == 0 and len(merges_of(db)) == 300 - 257
