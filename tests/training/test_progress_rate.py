"""JSON progress is rate-limited (about 2 lines a second, plus every milestone), and counting
reports at least every second however long a unit takes."""

from __future__ import annotations

import io
import json
import time

from cli_helpers import SPECIAL, json_lines, run_sub
from conftest import EN, fixture_text

from bpe_store import train
from bpe_store.inspection.progress import JSON_INTERVAL_S, JsonLines
from bpe_store.training import count_step as train_module


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def lines_of(buf: io.StringIO) -> list[dict]:
    return [json.loads(x) for x in buf.getvalue().splitlines()]


def test_json_lines_are_at_most_two_a_second_plus_milestones():
    clock, buf = Clock(), io.StringIO()
    rep = JsonLines(buf, clock=clock)
    rep({"stage": "plan", "file": "a.txt"})
    for i in range(1, 101):  # 100 counting events in 1 s
        clock.t = i / 100
        rep({"stage": "counting", "done": i, "total": 100})
    rep({"stage": "pairs"})
    for i in range(1, 2001):  # 2000 merging events in 2 s, a checkpoint every 500
        clock.t = 1 + i / 1000
        rep({"stage": "merging", "done": i, "total": 2000, "merge": ["a", "b", 3]})
        if i % 500 == 0:
            rep({"stage": "checkpoint", "phase": "merging", "done": i, "total": 2000, "write_s": 0.01})
    rep.note("", {"stage": "done", "merges": 2000})
    lines = lines_of(buf)
    stages = [e["stage"] for e in lines]
    # the milestones, each said: plan, the first and last counting event, pairs, the first and
    # last merging event, the last checkpoint, done
    assert stages[0] == "plan" and stages[-1] == "done" and "pairs" in stages
    counting = [e["done"] for e in lines if e["stage"] == "counting"]
    merging = [e["done"] for e in lines if e["stage"] == "merging"]
    assert counting[0] == 1 and counting[-1] == 100 and merging[0] == 1 and merging[-1] == 2000
    # every checkpoint is said (none was replaced by a newer one within the interval)
    assert [e["done"] for e in lines if e["stage"] == "checkpoint"] == [500, 1000, 1500, 2000]
    # 3 s of events: at most one line per JSON_INTERVAL_S beside the milestones
    assert len(lines) <= 3 / JSON_INTERVAL_S + 1 + 8, stages
    times = [e["elapsed_s"] for e in lines]
    assert times == sorted(times)


def test_a_real_run_writes_about_two_json_lines_a_second(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 1_000_000), encoding="utf-8")
    out = run_sub("train", corpus, "--db", tmp_path / "r.db", "--vocab-size", 3000, "--special", SPECIAL,
                  "--checkpoint-merges", "100", timeout=300)
    assert out.returncode == 0, out.stderr
    events = json_lines(out.stderr)
    assert len(events) == len(out.stderr.splitlines())
    elapsed = events[-1]["elapsed_s"]
    stages = {e["stage"] for e in events}
    # milestones: plan, counting x2, writing + checkpoint (final flush), pairs, merging x2, final
    # writing + checkpoint, done; and two lines a second
    assert len(events) <= 2 * elapsed + 14, (len(events), elapsed)
    assert {"plan", "counting", "pairs", "merging", "checkpoint", "done"} <= stages
    merging = [e for e in events if e["stage"] == "merging"]
    assert merging[-1]["done"] == merging[-1]["total"] == 3000 - 257


def test_counting_reports_every_second_while_a_unit_takes_longer(tmp_path, monkeypatch):
    """One unit that takes 3 s to count (a huge --chunk-size on a slow disk): events keep coming."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 100_000), encoding="utf-8")
    slow_task = train_module.count_chunk_native_task

    def slow(args):
        time.sleep(3.0)
        return slow_task(args)

    monkeypatch.setattr(train_module, "count_chunk_native_task", slow)
    seen: list[tuple[float, dict]] = []
    t0 = time.monotonic()
    train([corpus], tmp_path / "s.db", 300, [SPECIAL], workers=1, progress=lambda e: seen.append((time.monotonic(), e)))
    counting = [t - t0 for t, e in seen if e["stage"] == "counting"]
    assert counting[0] < 1.0
    gaps = [b - a for a, b in zip(counting, counting[1:])]
    assert len(counting) >= 3 and max(gaps) < 1.0 + 0.6, counting  # HEARTBEAT_S, checked 4 times as often
