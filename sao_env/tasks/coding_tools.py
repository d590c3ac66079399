"""The command language of the coding tool environments, on files held in memory (path -> text).

Shared by ``RepoEnv``, ``SWEBenchEnv`` (on files read from the container) and
``ForgeSource.demonstrate``, so that a demonstration's observations are exactly what the
environments answer. Commands: ``view``, ``edit``, ``diff``, ``run_tests``, ``submit`` (one per
action, the first word of its first line). Observation formats:

- ``view PATH``: the file, each line as ``N|text``; ``view`` alone: the file list, one a line.
- ``edit PATH LINE`` + newline + text: line ``LINE`` becomes the text (several lines when the
  text has several, an empty line when it is empty); the answer is ``ok`` and the new lines as
  ``N|text``.
- errors: one line starting with ``error:``.

Every observation ends with a newline, so the next action starts on a line of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from sao_env.tasks.tokens import CHARSET

COMMANDS = ("view", "edit", "diff", "run_tests", "submit")
USAGE = "commands: view, edit, diff, run_tests, submit"


def numbered(lines: list[str], start: int = 1) -> str:
    return "".join(f"{start + i}|{line}\n" for i, line in enumerate(lines))


def clean_path(path: str) -> str:
    path = path.strip().strip("'\"`")
    while path.startswith("./"):
        path = path[2:]
    return path


def view(files: Mapping[str, str], path: str) -> str:
    """The ``view`` observation of ``path`` (or of the file list when ``path`` is empty)."""
    path = clean_path(path)
    if not path:
        return "".join(f"{p}\n" for p in sorted(files))
    if path not in files:
        return f"error: no file '{path}'; files: {', '.join(sorted(files))}\n"
    return numbered(files[path].splitlines())


def edit(files: Mapping[str, str], header: str, text: str | None) -> tuple[dict[str, str] | None, str]:
    """Apply ``edit PATH LINE`` (``header`` is what follows the command) with replacement
    ``text`` (None when the action had no newline): (new files or None on error, observation)."""
    words = header.split()
    if len(words) != 2 or not words[1].isdigit():
        return None, "error: usage: edit PATH LINE, then a newline and the new text of that line\n"
    path, line = clean_path(words[0]), int(words[1])
    if path not in files:
        return None, f"error: no file '{path}'; files: {', '.join(sorted(files))}\n"
    if text is None:
        return None, "error: edit needs the new text after a newline\n"
    lines = files[path].splitlines()
    if not 1 <= line <= len(lines):
        return None, f"error: line {line} is outside 1-{len(lines)} of {path}\n"
    new_lines = text.split("\n")
    lines[line - 1: line] = new_lines
    updated = dict(files)
    updated[path] = "\n".join(lines) + "\n"
    return updated, "ok\n" + numbered(new_lines, line)


def parse(action: str) -> tuple[str, str, str | None]:
    """(command, rest of the first line, text after the first newline or None).

    Leading blank lines and one trailing newline of the text are ignored."""
    action = action.lstrip("\n ")
    first, newline, text = action.partition("\n")
    command, _, header = first.strip().partition(" ")
    if newline and text.endswith("\n"):
        text = text[:-1]
    return command, header.strip(), text if newline else None


def printable(text: str) -> str:
    """``text`` within the text spaces' alphabet: tabs as spaces, other characters as ``?``."""
    text = text.replace("\t", "    ").replace("\r", "")
    return "".join(ch if ch in CHARSET else "?" for ch in text)
