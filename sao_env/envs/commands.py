"""The command language of the coding tool environments (``RepoEnv``, ``SWEBenchEnv``).

One command per action, its name on the first line:

    view PATH                  show a file with line numbers
    edit PATH LINE             replace line LINE (1-based) of PATH with the text on the following
    <new text>                 lines (several lines replace one; nothing after the header deletes it)
    diff                       apply a unified diff (the text after this line, fences allowed)
    <unified diff>
    run_tests                  run the repository's tests
    submit                     end the episode; the working state is graded

``edit`` is compact enough for a tiny model to learn; ``diff`` is what real models write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMMANDS = ("view", "edit", "diff", "run_tests", "submit")


class CommandError(ValueError):
    """A malformed action; its message is the observation the policy gets back."""


@dataclass(frozen=True)
class Command:
    name: str
    path: str | None = None
    line: int | None = None
    text: str = ""


_FENCE = re.compile(r"^```[a-z]*\n(.*?)\n?```\s*$", re.DOTALL)


def parse_command(action: str) -> Command:
    """Parse one action; a ``CommandError`` names what is wrong and lists the commands."""
    text = action.strip("\n")
    header, _, body = text.partition("\n")
    words = header.split()
    if not words:
        raise CommandError(f"error: empty command; commands: {', '.join(COMMANDS)}")
    name, args = words[0], words[1:]
    if name not in COMMANDS:
        raise CommandError(f"error: unknown command {name!r}; commands: {', '.join(COMMANDS)}")
    if name in ("run_tests", "submit"):
        if args:
            raise CommandError(f"error: {name} takes no arguments")
        return Command(name)
    if name == "view":
        if len(args) != 1:
            raise CommandError("error: usage: view PATH")
        return Command(name, path=check_path(args[0]))
    if name == "edit":
        if len(args) != 2 or not args[1].isdigit() or int(args[1]) < 1:
            raise CommandError("error: usage: edit PATH LINE, then the new text on the next lines")
        return Command(name, path=check_path(args[0]), line=int(args[1]), text=body)
    if args:
        raise CommandError("error: usage: diff, then a unified diff on the next lines")
    fenced = _FENCE.match(body.strip())
    patch = fenced.group(1) if fenced else body
    if "@@" not in patch:
        raise CommandError("error: the diff has no hunk (@@ ... @@)")
    return Command(name, text=patch if patch.endswith("\n") else patch + "\n")


def check_path(path: str) -> str:
    """A repository-relative path; absolute paths and ``..`` are refused."""
    if path.startswith("/") or ".." in path.split("/") or "\\" in path:
        raise CommandError(f"error: {path!r} is not a path inside the repository")
    return path


def numbered(text: str) -> str:
    """A file as ``view`` shows it: ``N|line`` per line."""
    return "".join(f"{i}|{line}\n" for i, line in enumerate(text.splitlines(), start=1))


def replace_line(text: str, line: int, new: str) -> str:
    """``text`` with line ``line`` replaced by ``new`` (which may hold several lines, or none)."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        raise CommandError(f"error: line {line} is outside the file (1..{len(lines)})")
    lines[line - 1 : line] = new.splitlines()
    return "\n".join(lines) + ("\n" if lines else "")
