"""The ``sao-env`` command line: run, compare, leaderboard, list, eval, grade."""

from __future__ import annotations

from sao_env.cli.app import app, main

__all__ = ["app", "main"]
