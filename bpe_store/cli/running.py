"""What a long command (train, encode) shares: the progress display it shows (``--progress``)
and the signal handling that lets SIGINT/SIGTERM stop it at a checkpoint (``StopOnSignal``).
"""

from __future__ import annotations

import signal
import threading
from enum import Enum
from types import FrameType
from typing import Any

import typer

from ..errors import EXIT_SIGINT, EXIT_SIGTERM
from ..inspection.progress import Reporter


class ProgressMode(str, Enum):
    auto = "auto"
    bar = "bar"
    json = "json"
    none = "none"


class StopOnSignal:
    """SIGINT/SIGTERM handling for a training run.

    The first signal sets ``event``: training finishes its current sub-step, writes a checkpoint
    and raises ``Interrupted``. A second one raises KeyboardInterrupt at once; the open
    transaction is rolled back, so the store stays at its last checkpoint.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, notify: Any = None):
        self.event = threading.Event()
        self.signum: int | None = None
        self.notify = notify
        self._noted = False
        self._old: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        return EXIT_SIGTERM if self.signum == signal.SIGTERM else EXIT_SIGINT

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "SIGINT"

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        first = self.signum is None
        self.signum = signum
        if not first:
            raise KeyboardInterrupt
        self.event.set()  # nothing else here: writing to a stream inside a handler is not re-entrant

    def note_stopping(self) -> None:
        """Tell the person, once, that a stop is under way; called from the main flow, not the handler."""
        if self.signum is None or self._noted or self.notify is None:
            return
        self._noted = True
        self.notify(f"{self.signal_name}: finishing the current batch and writing a checkpoint "
                    "(press Ctrl-C again to stop at once)", {"stage": "stopping", "signal": self.signal_name})

    def watch(self, reporter: Any) -> Any:
        """A progress callable: ``reporter``, preceded by the stop notice once a signal came; a
        ``warning`` event is a note (printed on stderr even by the quiet reporter)."""
        from ..inspection.progress import Silent

        def progress(event: dict) -> None:
            self.note_stopping()
            if event.get("stage") == "warning":  # a message for the person: shown even with --quiet
                if isinstance(reporter, Silent):
                    typer.echo(event["message"], err=True)
                reporter.note(event["message"], event)
                return
            reporter(event)

        return progress

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old.clear()


def reporter_for(progress: ProgressMode, quiet: bool) -> Reporter:
    from ..inspection.progress import Silent, make_reporter

    return Silent() if quiet else make_reporter(progress.value)
