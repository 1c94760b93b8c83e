"""``bpe-store db ...``: the store file itself (``db upgrade``: schema migrations; ``db check``: every
check of a store).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .app import db_app, db_argument, set_verbose, verbose_option


@db_app.command("upgrade")
def db_upgrade(
    ctx: typer.Context,
    db: Path = db_argument(),
    verbose: bool = verbose_option(),
) -> None:
    """Upgrade a store's schema to this bpe-store's, in place (one transaction).

    Refused while a training run holds the store.

    \b
    Example: bpe-store db upgrade run.db
    """
    from ..store import migrate
    from ..store.store import Store

    set_verbose(ctx, verbose)
    with Store.open(db, allow_old=True) as store:
        before = migrate.current_revision(store.conn)
        store.conn.commit()
        head = migrate.head_revision()
        if before == head:
            typer.echo(f"{db}: already at the newest schema ({head})")
            return
        migrate.upgrade(store.conn)
        store.conn.commit()
    typer.echo(f"{db}: upgraded the schema from {before} to {head}")


@db_app.command("check")
def db_check(
    ctx: typer.Context,
    db: Path = db_argument(),
    deep: bool = typer.Option(False, "--deep", help="Also read every page (SQLite's quick_check) and every "
                                                     "word (rebuilt as a resume does): seconds on a big store."),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    verbose: bool = verbose_option(),
) -> None:
    """Run every check bpe_store makes of a store and say what is wrong (exit 0, or 4).

    The schema, the run, the inputs, the phase, the merge log and vocabulary (each merge's token
    is its two parts joined; each vocabulary row is what made it; the log matches the digest its
    newest checkpoint recorded) and the history rows. Read-only; safe while a run trains.

    \b
    Example: bpe-store db check run.db
    """
    from ..store.check import check_store
    from ..training.merge_step import check_words

    set_verbose(ctx, verbose)
    findings = check_store(db, deep=deep, words_check=check_words)
    failed = [f for f in findings if not f.ok]
    if as_json:
        typer.echo(json.dumps({"path": str(db), "ok": not failed,
                               "checks": [{"check": f.check, "ok": f.ok, "skipped": f.skipped, "problem": f.problem,
                                           "detail": f.detail} for f in findings]}, indent=1))
    else:
        width = max(len(f.check) for f in findings)
        for f in findings:
            verdict = "skip" if f.skipped else "ok" if f.ok else "FAILED"
            typer.echo(f"{verdict:<6}  {f.check:<{width}}  {f.detail if f.ok else f.problem}")
    if failed:
        from ..errors import StoreError

        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise StoreError(f"{db}: {len(failed)} of {len(findings)} checks failed: {failed[0].check}{more}")
