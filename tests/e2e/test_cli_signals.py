"""Stopping ``bpe-store train`` with SIGINT/SIGTERM mid-merge, in a real subprocess; and the
progress bars on a real (pseudo-)terminal."""

from __future__ import annotations

import json
import os
import pty
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, cli_cmd, env, run
from conftest import SMALL_TEXT

from bpe_store.inspection import answers
from bpe_store.store.store import Store
from bpe_store.training.train import read_result, train

VOCAB = 1500
TARGET = VOCAB - 257


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[tuple[bytes, bytes]]:
    """The merges of an uninterrupted run."""
    db = tmp_path_factory.mktemp("ref") / "ref.db"
    return train([SMALL_TEXT], db, VOCAB, [SPECIAL]).merges


def train_args(db: Path) -> list[str]:
    return ["train", str(SMALL_TEXT), "--db", str(db), "--vocab-size", str(VOCAB),
            "--special", SPECIAL, "--checkpoint-merges", "20", "--progress", "json"]


#: The run holds still for 2 s inside its second merging checkpoint's transaction, saying so on
#: stderr: a signal then comes mid-merge, past a checkpoint, however fast this machine merges (the
#: whole run merges in ~0.2 s, and JSON progress lines come at most about twice a second).
PAUSE = {"BPE_STORE_TEST_PAUSE": "checkpoint:2", "BPE_STORE_TEST_PAUSE_SECONDS": "2"}


def start(db: Path) -> subprocess.Popen:
    return subprocess.Popen(cli_cmd(*train_args(db)), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env=env() | PAUSE)


def wait_for_merging(proc: subprocess.Popen) -> list[str]:
    """Read progress until the run is merging (past its first checkpoint)."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("bpe_store: paused at checkpoint:"):
            return seen
        if line.startswith("{"):
            e = json.loads(line)
            if e["stage"] == "checkpoint" and e.get("phase") == "merging" and e["done"] > 0:
                return seen
    raise AssertionError("the run ended before merging:\n" + "".join(seen))


def stop_with(db: Path, *signals: int) -> tuple[int, str]:
    proc = start(db)
    seen = wait_for_merging(proc)
    for s in signals:
        proc.send_signal(s)
    _, rest = proc.communicate(timeout=60)
    return proc.returncode, "".join(seen) + rest


def at_a_checkpoint(db: Path) -> int:
    """The store is exactly at its last checkpoint, mid-merge; returns the merges it holds."""
    with Store.open(db, readonly=True) as store:
        merges = store.sql("SELECT count(*) FROM merges").scalar()
        last = store.sql("SELECT merges_done FROM checkpoints ORDER BY id DESC LIMIT 1").scalar()
        vocab = store.sql("SELECT count(*) FROM vocab").scalar()
        phase = store.run_row()["phase"]
    assert merges == last and vocab == 257 + merges
    assert phase == "merging" and 0 < merges < TARGET
    return merges


def lines_after(output: str, marker: str) -> str:
    lines = output.splitlines()
    return lines[lines.index(marker) + 1].strip()


def resume_argv(output: str) -> list[str]:
    lines = output.splitlines()
    cmd = shlex.split(lines[lines.index("Resume with:") + 1])
    assert cmd[:3] == ["python", "-m", "bpe_store"]
    return [sys.executable, *cmd[1:]]


@pytest.mark.slow
def test_sigint_mid_merge_saves_a_checkpoint_and_the_printed_command_resumes(tmp_path, reference):
    db = tmp_path / "run.db"
    code, out = stop_with(db, signal.SIGINT)
    assert code == 130, out
    assert "SIGINT: finishing the current batch" not in out  # JSON mode: notes are events
    messages = [line for line in out.splitlines() if not line.startswith(("{", "bpe_store: paused at"))]
    assert messages[0].startswith("SIGINT: stopped after a checkpoint; ")
    held = at_a_checkpoint(db)
    assert f"holds {held} of {TARGET} merges" in messages[0]
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    stages = [e["stage"] for e in events]
    assert stages[-2:] == ["checkpoint", "interrupted"] and "stopping" in stages
    assert events[-1]["signal"] == "SIGINT" and events[-1]["resume"] == lines_after(out, "Resume with:")
    argv = resume_argv(out)
    assert argv[3:] == train_args(db)
    with Store.open(db, readonly=True) as store:
        outcome = store.sql("SELECT outcome FROM sessions ORDER BY id DESC LIMIT 1").scalar()
    assert outcome == "interrupted"
    done = subprocess.run(argv, capture_output=True, text=True, env=env(), timeout=120)
    assert done.returncode == 0, done.stderr
    with Store.open(db, readonly=True) as store:
        assert read_result(store).merges == reference


def test_sigterm_mid_merge_exits_143_and_resumes_to_the_same_result(tmp_path, reference):
    db = tmp_path / "run.db"
    code, out = stop_with(db, signal.SIGTERM)
    assert code == 143, out
    assert "SIGTERM: stopped after a checkpoint" in out and "Resume with:" in out
    at_a_checkpoint(db)
    r = run(*train_args(db)[:-2], "--quiet", "--checkpoint-merges", "2000")
    assert r.exit_code == 0, r.output
    with Store.open(db, readonly=True) as store:
        assert read_result(store).merges == reference


def test_a_second_sigint_stops_at_once_at_the_last_checkpoint(tmp_path, reference):
    db = tmp_path / "run.db"
    t0 = time.monotonic()
    code, out = stop_with(db, signal.SIGINT, signal.SIGINT)
    assert code == 130, out
    assert time.monotonic() - t0 < 30
    assert "SIGINT: stopped" in out and "Resume with:" in out
    at_a_checkpoint(db)
    state = answers.status(db)["sessions"][-1]["state"]
    assert state == ("ended abruptly" if "stopped at once" in out else "interrupted")
    r = run(*train_args(db)[:-2], "--quiet", "--checkpoint-merges", "2000")
    assert r.exit_code == 0, r.output
    with Store.open(db, readonly=True) as store:
        assert read_result(store).merges == reference


@pytest.mark.slow
def test_progress_bars_render_on_a_terminal(tmp_path):
    master, slave = pty.openpty()
    e = env() | {"TERM": "xterm-256color", "COLUMNS": "140"}
    proc = subprocess.Popen(cli_cmd(*train_args(tmp_path / "r.db")[:-2]), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, env=e)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer has gone
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[" in screen and "━" in screen  # drawn, with colours, not JSON
    assert '{"stage"' not in screen
    for text in ("counting", "merging", f"{TARGET} / {TARGET} merges", "merges/s", "ETA", "checkpoint at",
                 f"kB / {SMALL_TEXT.stat().st_size / 1000:.1f} kB", f"vocab {VOCAB} (reached the vocabulary size)"):
        assert text in screen, text


def test_sigint_while_counting_keeps_the_counted_chunks(tmp_path, reference):
    db = tmp_path / "run.db"
    argv = [*train_args(db), "--chunk-size", "512"]
    proc = subprocess.Popen(cli_cmd(*argv), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env())
    for line in proc.stderr:
        # the first counting line (JSON lines are rate-limited: the next may come when counting is over)
        if line.startswith('{"stage": "counting"'):
            proc.send_signal(signal.SIGINT)
            break
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest
    assert "SIGINT: stopped after a checkpoint" in rest and "chunks counted" in rest
    with Store.open(db, readonly=True) as store:
        counted, total = store.sql("SELECT sum(counted), count(*) FROM chunks").one()
        assert store.run_row()["phase"] == "counting"
    assert 0 < counted < total
    assert f"holds {counted} of {total} chunks counted" in rest
    st = answers.status(db)
    assert st["phase"] == "counting" and st["speed_unit"] == "bytes/s" and st["eta_s"] > 0
    assert 0 < st["counting"]["bytes_done"] < st["counting"]["bytes_total"]
    r = run(*argv[:-4], "--quiet", "--checkpoint-merges", "2000")
    assert r.exit_code == 0, r.output
    with Store.open(db, readonly=True) as store:
        assert read_result(store).merges == reference
