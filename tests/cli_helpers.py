"""Helpers shared by the CLI tests: run the app in-process or as a subprocess, and read what it said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bpe_store.cli.main import app, main

ROOT = Path(__file__).resolve().parent.parent
SPECIAL = "<|endoftext|>"


def run(*args: str):
    """Invoke the app in-process (Typer's CliRunner); stdout and stderr stay apart."""
    return CliRunner().invoke(app, [str(a) for a in args], prog_name="bpe-store")


def run_main(args: list, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Call ``bpe_store.cli.main.main`` as the console script does: ``(exit code, stderr)``."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
        raise SystemExit(0)
    return exc.value.code or 0, capsys.readouterr().err


def one_error_line(err: str) -> bool:
    """Whether ``err`` is what a user error prints: one line, ``error: ...``."""
    return err.startswith("error: ") and err.count("\n") == 1


def cli_cmd(*args: str) -> list[str]:
    """The argv of ``python -m bpe_store ARGS``."""
    return [sys.executable, "-m", "bpe_store", *[str(a) for a in args]]


def env() -> dict[str, str]:
    """The test's environment, with the checkout importable and no terminal width surprises."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def run_sub(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cli_cmd(*args), capture_output=True, text=True, env=env(), timeout=timeout)


def json_lines(text: str) -> list[dict]:
    """The JSON objects among ``text``'s lines (other lines are messages for people)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
