"""Temporaries carry their writer's pid (and start time); a later run of the same command removes
those a kill -9 left, and never a live writer's (``bpe_store.temporaries``)."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import SPECIAL, cli_cmd, env

from bpe_store import Tokenizer, export_store
from bpe_store.temporaries import new_dir, new_file, owner_tag, remove_stale, temp_name

#: the middle of a temporary's name: PID-START-RANDOM
TAG = re.compile(r"(\d+)-(\d+)-[0-9a-f]{8}")


@pytest.fixture(scope="module")
def trained(trained_store, corpus) -> tuple[Path, Path]:
    return trained_store, corpus


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def started_paused(cmd: list, point: str, **kw) -> subprocess.Popen:
    """``cmd`` started with the test pause at ``point``, once it says it is paused there."""
    proc = subprocess.Popen([str(c) for c in cmd], stderr=subprocess.PIPE, text=True,
                            env={**env(), "BPE_STORE_TEST_PAUSE": point, **kw})
    said = []
    while line := proc.stderr.readline():  # progress lines may come first
        if f"paused at {point}" in line:
            return proc
        said.append(line)
    proc.wait()
    proc.stderr.close()
    pytest.fail(f"never paused at {point}: {''.join(said)}")


def killed(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    return proc.pid


def parts(d: Path, prefix: str) -> dict[int, Path]:
    """``{writer pid: path}`` of the temporaries named ``prefix`` + PID-START-RANDOM + .part in ``d``."""
    found = {}
    for p in d.iterdir():
        if p.name.startswith(prefix) and p.name.endswith(".part"):
            m = TAG.fullmatch(p.name[len(prefix):-len(".part")])
            assert m, f"{p.name}: no PID-START-RANDOM in the name"
            found[int(m[1])] = p
    return found


# -- the rule --------------------------------------------------------------------------------------

def test_a_name_carries_the_pid_and_start_time():
    pid, start = owner_tag().split("-")
    assert int(pid) == os.getpid()
    with open(f"/proc/{os.getpid()}/stat") as f:
        assert int(start) == int(f.read().rsplit(")", 1)[1].split()[19])
    assert TAG.fullmatch(temp_name("", ""))


def test_only_the_temporaries_of_gone_writers_are_removed(tmp_path):
    me, start = owner_tag().split("-")
    dead = gone_pid()
    names = {
        "dead writer": f".o.npy.{dead}-{start}-00000001.part",
        "dead writer, a folder": f".o.npy.{dead}-{start}-00000002.part",
        "pid reused by a later process": f".o.npy.{me}-{int(start) - 1}-00000003.part",
        "live writer": f".o.npy.{me}-{start}-00000004.part",
        "live writer, start unknown": f".o.npy.{me}-0-00000005.part",
        "dead pid, but its flock is held": f".o.npy.{dead}-0-00000006.part",
        "old name without a pid": ".o.npy.k3j_x9a1.part",
        "another output's": f".other.npy.{dead}-{start}-00000007.part",
    }
    for what, name in names.items():
        if "folder" in what:
            (tmp_path / name).mkdir()
            (tmp_path / name / "tokenizer.json").write_text("{}")
        else:
            (tmp_path / name).write_bytes(b"x")
    held = os.open(tmp_path / names["dead pid, but its flock is held"], os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a writer the pid cannot show (another pid namespace)
    try:
        removed = remove_stale(tmp_path, ".o.npy.", ".part")
    finally:
        os.close(held)
    gone = {"dead writer", "dead writer, a folder", "pid reused by a later process"}
    assert sorted(p.name for p in removed) == sorted(names[w] for w in gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for w, n in names.items() if w not in gone)


def test_new_temporaries_are_flocked_while_written(tmp_path):
    fd, path = new_file(tmp_path, ".a.", ".part")
    dfd, folder = new_dir(tmp_path, ".b.", ".part")
    probe = os.open(path, os.O_RDONLY)
    dprobe = os.open(folder, os.O_RDONLY)
    try:
        for p in (probe, dprobe):
            with pytest.raises(BlockingIOError):
                fcntl.flock(p, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        for f in (probe, dprobe, fd, dfd):
            os.close(f)
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


# -- real kills, then the same command ------------------------------------------------------------

def test_encode_killed_mid_write_then_rerun_removes_its_temporary_not_a_live_ones(trained, tmp_path):
    db, src = trained
    big = tmp_path / "in.txt"
    big.write_bytes(src.read_bytes() * 4)
    out = tmp_path / "ids.npy"
    cmd = cli_cmd("encode", db, big, "-o", out)
    dead = killed(started_paused(cmd, "encode:written"))
    assert list(parts(tmp_path, ".ids.npy.")) == [dead]  # what the kill left
    live = started_paused(cmd, "encode:written")  # a second writer of the same name, still running
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
        assert r.returncode == 0, r.stderr
        assert list(parts(tmp_path, ".ids.npy.")) == [live.pid]  # the stale one went, the live one stays
        assert np.load(out).tolist() == Tokenizer.from_store(db).encode(big.read_text(encoding="utf-8"))
    finally:
        killed(live)
    r = subprocess.run(cmd + ["--force"], capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert parts(tmp_path, ".ids.npy.") == {}


@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "force-into-existing"])
def test_export_killed_while_staging_then_rerun_removes_its_folder(trained, tmp_path, existing):
    db, _ = trained
    out = tmp_path / "tok"
    extra = ["--force"] if existing else []
    if existing:
        export_store(db, "hf", out)
    cmd = cli_cmd("export", db, "--format", "hf", "-o", out, *extra)
    dead = killed(started_paused(cmd, "export:staged"))
    where = out if existing else tmp_path
    assert list(parts(where, ".tok.")) == [dead] and (parts(where, ".tok.")[dead] / "tokenizer.json").exists()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert parts(tmp_path, ".tok.") == {} and parts(out, ".tok.") == {}
    export_store(db, "hf", tmp_path / "clean")
    assert (out / "tokenizer.json").read_bytes() == (tmp_path / "clean" / "tokenizer.json").read_bytes()


def test_train_bpe_killed_then_rerun_removes_its_scratch_folder(tmp_path, corpus):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = ("import sys; from bpe_store import train_bpe; "
            f"v, m = train_bpe(sys.argv[1], 300, [{SPECIAL!r}]); print(len(m))")
    cmd = [sys.executable, "-c", code, corpus]
    dead = killed(started_paused(cmd, "create", TMPDIR=str(scratch)))
    left = [p.name for p in scratch.iterdir()]
    assert len(left) == 1 and left[0].startswith(f"bpe_store-train-{dead}-"), left
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env={**env(), "TMPDIR": str(scratch)},
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(300 - 257)
    assert list(scratch.iterdir()) == []


def test_a_killed_creation_of_a_store_is_removed_with_sqlites_files(tmp_path):
    from bpe_store import Store

    me, start = owner_tag().split("-")
    dead = gone_pid()
    db = tmp_path / "run.db"
    stale = [f".run.db.creating-{dead}-{start}-0000000a{t}" for t in ("", "-wal", "-shm", "-journal")]
    older = f".run.db.creating-{dead}-0000000b"  # the form before start times: pid only
    live = f".run.db.creating-{me}-{start}-0000000c"
    for n in (*stale, older, live):
        (tmp_path / n).write_bytes(b"")
    Store.create(db).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.db", live])


def test_an_encode_or_export_refused_as_already_existing_still_removes_a_killed_ones_temporary(trained, tmp_path):
    """A kill leaves a temporary; the output exists meanwhile (a run beside it, or one killed after
    its rename): the same command, refused with "already exists", removes the dead writer's file."""
    db, src = trained
    out = tmp_path / "ids.npy"
    cmd = cli_cmd("encode", db, src, "-o", out)
    dead = killed(started_paused(cmd, "encode:written"))
    assert list(parts(tmp_path, ".ids.npy.")) == [dead]
    out.write_bytes(b"x")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 2 and "already exists" in r.stderr, r.stderr
    assert parts(tmp_path, ".ids.npy.") == {}
    tok = tmp_path / "tok"
    cmd = cli_cmd("export", db, "--format", "hf", "-o", tok)
    dead = killed(started_paused(cmd, "export:staged"))
    assert list(parts(tmp_path, ".tok.")) == [dead]
    tok.mkdir()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 2 and "already exists" in r.stderr, r.stderr
    assert parts(tmp_path, ".tok.") == {}
