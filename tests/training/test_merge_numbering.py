"""One merge numbering everywhere: a merge's rank counts from 0 (the first merge is rank 0, and
makes token id ``n_special + 256 + rank`` when its bytes are new), in the store, the views, the
CLI, the report and the API."""

from __future__ import annotations

import json
import sqlite3

import pytest
from cli_helpers import SPECIAL, run
from conftest import SMALL_TEXT

from bpe_store import train

VOCAB = 300


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("numbering") / "run.db"
    result = train([SMALL_TEXT], db, VOCAB, [SPECIAL])
    return db, result


def test_the_first_merge_is_rank_0_everywhere(store):
    db, result = store
    first_id = 1 + 256
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT min(rank), max(rank) FROM merges").fetchone() == (0, VOCAB - first_id - 1)
        view = con.execute("SELECT rank, left_hex, right_hex, token_id FROM merge_log LIMIT 1").fetchone()
    finally:
        con.close()
    # the API: merges[rank]
    assert (view[0], bytes.fromhex(view[1]), bytes.fromhex(view[2]), view[3]) == (0, *result.merges[0], first_id)
    # show merges
    shown = json.loads(run("show", db, "merges", "-n", "1", "-f", "json").stdout)[0]
    assert shown["rank"] == 0 and shown["token_id"] == first_id
    # why: the tree says "merge rank 0", the JSON rank 0
    r = run("why", db, str(first_id), "--id")
    assert r.stdout.splitlines()[0].endswith(f"(id {first_id}, merge rank 0, count {result.merge_counts[0]})")
    assert json.loads(run("why", db, str(first_id), "--id", "--json").stdout)["token"]["rank"] == 0


def test_the_report_axis_counts_ranks_from_0(store, tmp_path):
    pytest.importorskip("matplotlib")
    from bpe_store.inspection.report import write_report

    db, _ = store
    out = tmp_path / "r.html"
    write_report(db, out)
    page = out.read_text(encoding="utf-8")
    assert "merge rank (0 = first)" in page and "1 = first" not in page
