"""The progress display tells the truth: the bottom line, the final write, a resume, 80 columns."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import time

from cli_helpers import SPECIAL, cli_cmd, env, json_lines, run_sub
from conftest import SMALL_TEXT
from rich.console import Console

from bpe_store.inspection.display import width
from bpe_store.inspection.progress import Bars


def bars(columns: int) -> tuple[Bars, Console]:
    console = Console(file=io.StringIO(), width=columns, force_terminal=True, color_system=None,
                      legacy_windows=False)
    b = Bars(console, clock=iter(float(t) for t in range(10_000)).__next__)
    b.progress.stop()  # no live thread: the test renders frames itself
    return b, console


def frame(b: Bars, columns: int) -> list[str]:
    """What the display shows now, line by line, as a terminal of ``columns`` would."""
    out = Console(file=io.StringIO(), width=columns, color_system=None, record=True)
    for r in b._renderables():
        out.print(r)
    return [line.rstrip() for line in out.export_text().splitlines()]


def feed(b: Bars, events: list[dict]) -> None:
    for e in events:
        b(e)


MERGING = [{"stage": "merging", "done": 12000 + i, "total": 31744, "merge": [" t", "he", 51210]} for i in range(3)]
COUNTING = [{"stage": "counting", "done": i * 33_000_000, "total": 99_997_028} for i in range(3)]


def test_every_line_fits_80_columns_and_each_stage_is_one_line():
    b, _ = bars(80)
    feed(b, COUNTING + [{"stage": "checkpoint", "phase": "counting", "done": 99_997_028, "total": 99_997_028}]
         + [{"stage": "pairs"}] + MERGING)
    lines = frame(b, 80)
    assert all(width(x) <= 80 for x in lines), lines
    counting = [x for x in lines if x.startswith("counting")]
    merging = [x for x in lines if x.startswith("merging")]
    assert len(counting) == 1 and len(merging) == 1, lines  # one line per stage, nothing wrapped
    assert "12002 / 31744 merges" in merging[0] and "ETA " in merging[0] and "merges/s" in merging[0]
    assert "66.0 MB / 100.0 MB" in counting[0] and "MB/s" in counting[0]
    assert any("last merge ' t' + 'he'  (51210)" in x for x in lines)  # the current merge, on its own line
    wide, _ = bars(140)
    feed(wide, MERGING)
    wl = frame(wide, 140)
    assert [x for x in wl if x.startswith("merging")][0].endswith("' t' + 'he'  (51210)")


def test_no_stale_bottom_line_while_merging():
    b, _ = bars(100)
    feed(b, COUNTING + [{"stage": "checkpoint", "phase": "counting", "done": 1, "total": 1}, {"stage": "pairs"}])
    assert frame(b, 100)[-1] == "counting pairs of the counted words"
    feed(b, MERGING[:1])
    assert "counting pairs" not in "\n".join(frame(b, 100)) and "counted" not in frame(b, 100)[-1]
    feed(b, [{"stage": "checkpoint", "phase": "merging", "done": 12000, "total": 31744, "write_s": 0.25}])
    feed(b, MERGING[1:])
    assert frame(b, 100)[-1].endswith("12000 merges, written in 0.25 s")  # same stage: still true


def test_the_final_write_and_a_resume_are_visible():
    b, _ = bars(80)
    feed(b, [{"stage": "loading", "phase": "merging", "done": 4000, "total": 31744, "words": 445087}])
    assert frame(b, 80)[-1] == ("resuming: loading 445,087 words and 4,000 merges from the store, checking its "
                                "pair counts")[:79] + "…"
    feed(b, MERGING + [{"stage": "writing", "phase": "merging", "done": 31744, "total": 31744, "words": 1234,
                        "final": False}])
    assert frame(b, 80)[-1] == "writing checkpoint (1,234 words)"
    feed(b, MERGING + [{"stage": "writing", "phase": "merging", "done": 31744, "total": 31744, "words": 0,
                        "final": True}])
    assert frame(b, 80)[-1] == "writing final checkpoint"


def test_train_emits_writing_before_the_final_checkpoint_and_loading_on_resume(tmp_path):
    db = tmp_path / "r.db"
    first = run_sub("train", str(SMALL_TEXT), "--db", str(db), "--vocab-size", "350", "--special", SPECIAL)
    assert first.returncode == 0, first.stderr
    events = json_lines(first.stderr)
    stages = [e["stage"] for e in events]
    i = len(stages) - 1 - stages[::-1].index("writing")
    # the last write drops the merging's working state but the most frequent words' tokens
    assert events[i]["final"] is True and events[i]["phase"] == "merging" and events[i]["words"] > 0
    assert stages[i + 1] == "checkpoint" and events[i + 1]["words"] == events[i]["words"]
    count_write = [e for e in events if e["stage"] == "writing" and e["phase"] == "counting"]
    assert count_write and count_write[-1]["final"] is True and count_write[-1]["words"] > 100
    assert "loading" not in stages  # a fresh run builds the engine from the counts it just made
    more = run_sub("train", str(SMALL_TEXT), "--db", str(db), "--vocab-size", "400", "--special", SPECIAL)
    assert more.returncode == 0, more.stderr
    ev = json_lines(more.stderr)
    loading = [e for e in ev if e["stage"] == "loading"]
    assert len(loading) == 1 and loading[0]["done"] == 350 - 257 and loading[0]["words"] > 100
    assert [e["stage"] for e in ev].index("loading") < [e["stage"] for e in ev].index("merging")


def test_bars_on_a_real_80_column_terminal(tmp_path):
    """Through a pty: the bars are drawn (not JSON), and no drawn line is wider than 80 cells."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    e = env()
    e.pop("COLUMNS", None)
    e["TERM"] = "xterm"
    proc = subprocess.Popen(cli_cmd("train", SMALL_TEXT, "--db", tmp_path / "t.db", "--vocab-size", "600",
                                    "--special", SPECIAL, "--checkpoint-merges", "20"),
                            stdin=slave, stdout=slave, stderr=slave, env=e, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    assert proc.returncode == 0
    text = b"".join(chunks).decode("utf-8", "replace")
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text)
    lines = [x for x in re.split(r"[\r\n]", plain) if x.strip()]
    assert not any(x.lstrip().startswith("{") for x in lines)  # bars, not JSON lines
    assert any(x.startswith("merging") for x in lines), lines[-10:]
    assert max(width(x) for x in lines) <= 80, max(lines, key=width)
