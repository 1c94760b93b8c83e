"""Progress reporting for ``bpe-store train``: rich bars on a terminal, JSON lines otherwise.

``train()`` calls its ``progress`` callable with events such as
``{"stage": "merging", "done": 1200, "total": 31744, "merge": ["t", "he", 5121]}``; the stages
are plan, counting, pairs, loading (a resume reading the store back), merging, writing (a
checkpoint is being written: ``words``, ``final``), checkpoint (see ``bpe_store.training.train``),
merge_log, and deferred (a write put off while a reader pins the WAL: ``what``, ``waiting``, see
``bpe_store.training.wal_watch``). A reporter adds
what a person wants to know (speed, ETA) and shows it:

* ``JsonLines``: one JSON object per event on a stream, always with the keys ``stage``, ``done``,
  ``total``, ``eta_s`` (``null`` when unknown), plus ``rate``, ``unit``, ``elapsed_s`` and the
  event's own fields. For logs, notebooks and scripts.
* ``Bars``: rich progress bars, one per stage (counting: MB, MB/s, ETA; merging: merges,
  merges/s, ETA, the current merge and its count) and a line for the last checkpoint.
* ``Silent``: nothing (``--quiet``).

Speeds are measured over a sliding window of this session, so an ETA follows the current pace.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

#: Seconds of history a speed is measured over.
WINDOW_S = 20.0
#: The unit of ``done``/``total`` per stage.
UNITS = {"counting": "bytes", "merging": "merges", "encoding": "bytes"}  # encoding: `bpe-store encode`

Event = dict[str, Any]


class Meter:
    """Speed and ETA of one stage, from ``(time, done)`` samples over a sliding window."""

    def __init__(self, window_s: float = WINDOW_S):
        self.window_s = window_s
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, done: float) -> None:
        self.samples.append((t, done))
        while len(self.samples) > 2 and t - self.samples[1][0] >= self.window_s:
            self.samples.popleft()

    def rate(self) -> float | None:
        """Units per second, or None before two samples far enough apart."""
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        if t1 - t0 < 1e-3 or d1 < d0:
            return None
        return (d1 - d0) / (t1 - t0)

    def eta(self, done: float, total: float | None) -> float | None:
        """Seconds left at the current speed; 0 once done; None when unknown."""
        if total is None:
            return None
        if done >= total:
            return 0.0
        r = self.rate()
        return (total - done) / r if r else None


class Reporter:
    """Base reporter: turns events into enriched events; subclasses show them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.start = clock()
        self.meters: dict[str, Meter] = {}

    def enrich(self, event: Event) -> Event:
        """The event with ``done``, ``total``, ``eta_s``, ``rate``, ``unit`` and ``elapsed_s``."""
        stage = event.get("stage")
        phase = event.get("phase", stage)  # a checkpoint reports on its phase's meter
        done, total = event.get("done"), event.get("total")
        now = self.clock()
        rate = eta = None
        if phase in UNITS and done is not None:
            meter = self.meters.setdefault(phase, Meter())
            if stage == phase:
                meter.add(now, done)
            rate, eta = meter.rate(), meter.eta(done, total)
        out: Event = {"stage": stage, "done": done, "total": total,
                      "eta_s": None if eta is None else round(eta, 1),
                      "rate": None if rate is None else round(rate, 1),
                      "unit": UNITS.get(phase), "elapsed_s": round(now - self.start, 3)}
        out.update({k: v for k, v in event.items() if k not in out})
        return out

    def __call__(self, event: Event) -> None:
        self.show(self.enrich(event))

    def show(self, event: Event) -> None:
        """Display one enriched event."""

    def note(self, text: str, event: Event | None = None) -> None:
        """A message for the person watching (stopping, saved, resume command)."""

    def close(self) -> None:
        """Stop drawing; later output goes below the bars."""

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Silent(Reporter):
    """``--quiet``: shows nothing."""


#: JSON progress writes at most one line per this many seconds, milestones aside (``JsonLines``).
JSON_INTERVAL_S = 0.5
#: Stages a JSON line is always written for: each happens once or twice a run.
MILESTONES = frozenset({"plan", "pairs", "loading", "done", "interrupted", "warning", "deferred"})


class JsonLines(Reporter):
    """One JSON object per line (``{"stage":..,"done":..,"total":..,"eta_s":..}``) on a stream.

    At most one line per ``JSON_INTERVAL_S`` (about 2 a second), plus every milestone: a
    ``MILESTONES`` stage, the first event of a phase (counting, merging, encoding, ...), a final
    write and a stage reaching its total. Why: merging reports every 64 merges, which is dozens of
    events a second on a small run, and a log wants the state twice a second, not every step. An
    event in between is dropped (the next one carries its state forward), except a checkpoint:
    it is written at the next line's turn instead of that line, so no committed checkpoint goes
    unsaid unless a newer one replaces it.
    """

    def __init__(self, stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = JSON_INTERVAL_S):
        super().__init__(clock)
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self._last_line = -float("inf")  # clock time of the last line written
        self._phase: str | None = None  # the phase of the last event seen
        self._checkpoint: Event | None = None  # a checkpoint not written yet

    def _milestone(self, event: Event) -> bool:
        stage = event.get("stage")
        phase = event.get("phase", stage)
        done, total = event.get("done"), event.get("total")
        return (stage in MILESTONES or phase != self._phase or bool(event.get("final"))
                or (done is not None and total is not None and done >= total))

    def show(self, event: Event) -> None:
        now = event.get("elapsed_s") or 0.0  # the clock read by ``enrich``
        milestone = self._milestone(event)
        self._phase = event.get("phase", event.get("stage"))
        if milestone:
            if self._checkpoint is not None and event.get("stage") != "checkpoint":
                self._write(self._checkpoint, now)
            self._write(event, now)
        elif now - self._last_line >= self.interval_s:
            self._write(self._checkpoint if self._checkpoint is not None and event.get("stage") != "checkpoint"
                        else event, now)
        elif event.get("stage") == "checkpoint":
            self._checkpoint = event

    def _write(self, event: Event, now: float) -> None:
        if event.get("stage") == "checkpoint":
            self._checkpoint = None
        self._last_line = now
        self.stream.write(json.dumps(event, ensure_ascii=False) + "\n")
        self.stream.flush()

    def note(self, text: str, event: Event | None = None) -> None:
        if event is not None:
            self.show(self.enrich(event))


def format_duration(seconds: float | None) -> str:
    """``75.2`` -> ``"0:01:15"``; ``None`` -> ``"?"``."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def format_bytes(n: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, like disk sizes)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def visible(text: str, limit: int = 24) -> str:
    """A token quoted and escaped as every table shows it (``bpe_store.inspection.display``), cut to ``limit``."""
    from .display import quote

    r = quote(text)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


def describe(event: Event) -> tuple[str, str, str]:
    """``(amount, speed, note)`` texts for a bar, from an enriched event."""
    done, total, rate = event.get("done") or 0, event.get("total"), event.get("rate")
    if event.get("unit") == "bytes":
        amount = f"{format_bytes(done)} / {format_bytes(total or 0)}"
        speed = f"{format_bytes(rate)}/s" if rate else ""
    else:
        amount = f"{done} / {total} merges"
        speed = f"{rate:.0f} merges/s" if rate else ""
    note = ""
    merge = event.get("merge")
    if merge:
        note = f"{visible(merge[0])} + {visible(merge[1])}  ({merge[2]})"
    if event.get("in_flight") is not None:  # counting on Ray (bpe_store.counting.ray_count)
        note = f"Ray: {event['in_flight']} units in flight, {event.get('workers')} CPUs on {event.get('nodes')} nodes"
    return amount, speed, note


#: Below this many columns the current merge moves from the bar's line to a line of its own.
WIDE_COLUMNS = 120


def _deferred_line(event: Event, what: str, phase: str) -> str:
    """A ``deferred`` event (``bpe_store.training.wal_watch``) as one line, with the budgets."""
    wal = format_bytes(event.get("wal_bytes") or 0)
    budget = f" of {format_bytes(event['wal_budget'])}" if event.get("wal_budget") else ""
    if event.get("into_wal"):
        return f"{what} written into the WAL: a reader holds an old snapshot (WAL {wal}{budget})"
    if event.get("waiting"):
        then = "the WAL is past its budget: waiting for the reader to leave"
    elif phase == "merging":
        then = "only merge logs are written meanwhile"
    else:
        words = f" (up to {event['memory_words']:,} words)" if event.get("memory_words") else ""
        then = f"kept in memory{words}"
    return f"{what} deferred: a reader holds an old snapshot (WAL {wal}{budget}); {then}"


class Bars(Reporter):
    """Rich progress bars on a terminal: one line per stage, then a line for what happens now
    (reading, counting pairs, loading, writing a checkpoint, the last checkpoint).

    Fits the terminal: the bar takes what the text leaves, and below ``WIDE_COLUMNS`` the current
    merge gets its own line, so every line fits 80 columns. The bottom line belongs to a stage:
    a stage's bar moving on clears a line left by an earlier stage (no stale "counting pairs"
    under the merging bar).
    """

    def __init__(self, console: Any = None, clock: Callable[[], float] = time.monotonic):
        super().__init__(clock)
        from rich.console import Console, Group
        from rich.progress import BarColumn, Progress, TextColumn
        from rich.text import Text

        self._text, self._group = Text, Group
        self.console = console if console is not None else Console(stderr=True)
        self.footer = ""
        self.footer_phase: str | None = None  # the stage the bottom line is about
        self.current = ""  # the current merge, on its own line when the terminal is narrow
        width = self.console.width
        self.wide = width >= WIDE_COLUMNS
        # name 9 + amount ~20 + speed ~13 + ETA 11 + separators: the bar gets the rest (10..30)
        bar = max(10, min(30, width - 62 - (40 if self.wide else 0)))
        columns = [TextColumn("{task.description:<9}"), BarColumn(bar_width=bar),
                   TextColumn("{task.fields[amount]}"), TextColumn("{task.fields[speed]}"),
                   TextColumn("ETA {task.fields[eta]}")]
        if self.wide:
            columns.append(TextColumn("{task.fields[note]}"))
        self.progress = Progress(*columns, console=self.console, refresh_per_second=5, get_time=clock)
        self.progress.get_renderables = self._renderables  # type: ignore[method-assign]
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def _renderables(self):
        lines = [self.progress.make_tasks_table(self.progress.tasks)]
        if self.current and not self.wide:
            lines.append(self._text(self.current, no_wrap=True, overflow="ellipsis"))
        lines.append(self._text(self.footer, style="dim", no_wrap=True, overflow="ellipsis"))
        yield self._group(*lines)

    def _say(self, text: str, phase: str | None) -> None:
        self.footer, self.footer_phase = text, phase

    def _task(self, stage: str, total: float | None) -> Any:
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(stage, total=total, amount="", speed="",
                                                       eta="?", note="")
        return self.tasks[stage]

    def show(self, event: Event) -> None:
        stage = event["stage"]
        phase = event.get("phase")
        if stage == "plan":
            self._say(f"reading {event.get('file', '')}", "plan")
        elif stage == "pairs":
            self._say("counting pairs of the counted words", "pairs")
        elif stage == "loading":
            self._say(f"resuming: loading {event.get('words', 0):,} words and {event.get('done', 0):,} merges "
                      "from the store, checking its pair counts", "loading")
        elif stage == "writing":
            what = "final checkpoint" if event.get("final") else "checkpoint"
            words = event.get("words", 0)  # none: the end of merging (merges only)
            self._say(f"writing {what} ({words:,} words)" if words else f"writing {what}", phase)
        elif stage == "deferred":  # see bpe_store.training.wal_watch
            what = event.get("what", "checkpoint")
            self._say(_deferred_line(event, what, phase), phase)
        elif stage == "checkpoint":
            at = time.strftime("%H:%M:%S")
            what = (f"{event.get('done')} merges" if phase == "merging"
                    else f"{format_bytes(event.get('done') or 0)} counted")
            write = f", written in {event['write_s']:.2f} s" if event.get("write_s") is not None else ""
            self._say(f"checkpoint at {at}: {what}{write}", phase)
            if event.get("wal_blocked"):  # see Store._truncate_wal
                self.footer += (f"; WAL {format_bytes(event.get('wal_bytes') or 0)}: a reader holds an old "
                                "snapshot, so it cannot be emptied")
        elif stage in UNITS:
            if self.footer_phase != stage:
                self._say("", stage)  # a line about an earlier stage is stale now
            amount, speed, note = describe(event)
            self.current = f"  last merge {note}" if note else ""
            self.progress.update(self._task(stage, event.get("total")), completed=event.get("done") or 0,
                                 total=event.get("total"), amount=amount, speed=speed,
                                 eta=format_duration(event.get("eta_s")), note=note)
        self.progress.refresh()

    def note(self, text: str, event: Event | None = None) -> None:
        if text:
            self.console.print(text, markup=False, highlight=False)

    def close(self) -> None:
        self.progress.stop()


class Plain(Reporter):
    """Notes only, as plain lines (progress bars off, messages on)."""

    def __init__(self, stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic):
        super().__init__(clock)
        self.stream = stream if stream is not None else sys.stderr

    def note(self, text: str, event: Event | None = None) -> None:
        if text:
            self.stream.write(text + "\n")
            self.stream.flush()


def make_reporter(mode: str, stream: IO[str] | None = None) -> Reporter:
    """``auto`` (bars if the stream is a terminal, else JSON lines), ``bar``, ``json`` or ``none``."""
    stream = stream if stream is not None else sys.stderr
    if mode == "auto":
        mode = "bar" if stream.isatty() else "json"
    if mode == "json":
        return JsonLines(stream)
    if mode == "bar":
        from rich.console import Console

        return Bars(Console(file=stream))
    if mode == "none":
        return Plain(stream)
    raise ValueError(f"unknown progress mode {mode!r}")
