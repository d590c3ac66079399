"""How many one-token changes to recently added code do the tests catch? A seeded, mechanical planted-bug round.

    python bench/mutants.py --since 1cf44aa --count 30 --seed 5 --out /tmp/mutants [--wider] [--tests-at COMMIT]
                            [--operators tokens|all|hand] [--plan-only]
    python bench/mutants.py --since 1cf44aa --planted PLANTED.jsonl --out DIR --wider    (bugs planted by hand)

The lines: every line of ``sao_env`` that ``git diff -U0 SINCE TESTS_AT`` adds (``--tests-at``, default HEAD) and
that holds a token one of the operators below can change (so no comment, docstring, import, decorator or
``def``/``class`` header). The sample: ``--count`` lines drawn with ``--seed``, one change drawn per line. The
changes, the kinds a reviewer's slip makes (Offutt et al., "An experimental determination of sufficient mutant
operators", TOSEM 1996: relational, logical and constant replacements): a comparison flipped or moved by one
(``==``/``!=``, ``<``/``<=``, ``>``/``>=``), ``and``/``or``, a ``not`` dropped, ``is``/``is not``,
``in``/``not in``, ``True``/``False``, ``+``/``-``, ``+=``/``-=``, an integer literal plus one, ``min``/``max``,
``break``/``continue``; with ``--operators all`` also a one-line statement left out and a keyword argument
dropped from a call. ``--operators hand`` makes only the well-typed slips the by-hand rounds planted and missed
most, which no one-token change makes: a clause of ``and``/``or`` left out, two positional arguments or two keyword
arguments' values swapped, a slice's start and end swapped, a local name replaced by the most similar other name its
function binds (``window`` for ``global_window``), an attribute read as data by the most similar other attribute the
module reads from that name (``spec.max_tokens`` for ``spec.max_new_tokens``); a swap of literals (``open("rb",
path)``) or of ``isinstance``'s arguments is left out, being a type error at once. A change must compile and change
the module's syntax tree.

The tests: the test files that import the changed module (its dotted name, or ``from PACKAGE import NAME``),
slow ones included, stopped at the first failure, in a git worktree of TESTS_AT holding the one change (the
checkout is never touched; ``OUT/shared`` links the checkout's ``../shared``, whose benchmark rows the tests read).
A mutant is caught when a test fails that passes without the change (each failing test is run again on the
unchanged code; one that fails there too is deselected and the tests run again), or when pytest runs past
``--timeout`` (a module that no longer imports, so that pytest cannot start, is caught too); it survives when they
pass. A survivor is a line that no targeted test pins, or a change that does not alter behaviour (an equivalent
mutant): each needs a look.
A module that no test file imports is run against every fast test (``-m "not slow"``), as is a survivor with
``--wider``.

``--planted FILE`` runs changes planted by hand instead of drawn ones (a JSON line each: ``file``, ``line``, ``old``,
the exact text on that line, ``new`` and ``why``), through the same tests; the file is the round's plan, written
before any run.

Writes OUT/plan.jsonl (the drawn mutants, before any run) and OUT/mutants.jsonl (one row per mutant: file, line,
old and new token, operator, test files, outcome, the tests that failed, seconds), skipping the rows already there, so that an
interrupted round resumes; prints progress and a summary.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import json
import os
import random
import signal
import re
import subprocess
import sys
import time
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SWAPS = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "+": "-", "-": "+", "+=": "-=",
         "-=": "+=", "and": "or", "or": "and", "True": "False", "False": "True", "min": "max", "max": "min",
         "break": "continue", "continue": "break"}
SKIP_STARTS = ("import ", "from ", "@", "def ", "async def ", "class ", "#")


@dataclass(frozen=True)
class Mutant:
    file: str
    line: int
    col: int
    operator: str
    old: str
    new: str

    @property
    def key(self) -> str:
        return f"{self.file}:{self.line}:{self.col}:{self.operator}"


def added_lines(since: str, at: str) -> dict[str, set[int]]:
    """{path: line numbers at ``at``} of the lines under sao_env that the diff ``since..at`` adds."""
    diff = subprocess.run(["git", "diff", "-U0", f"{since}..{at}", "--", "sao_env"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    found: dict[str, set[int]] = {}
    path = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") and line.endswith(".py") else None
        elif path and line.startswith("@@"):
            start, _, count = re.match(r"@@ -\S+ \+(\d+)(,(\d+))? @@", line).groups()
            found.setdefault(path, set()).update(range(int(start), int(start) + (int(count) if count else 1)))
    return found


def candidates(path: str, source: str, lines: set[int]) -> list[Mutant]:
    """Every change the operators make to a token that starts on one of ``lines``."""
    text = source.splitlines()
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    out = []
    for i, tok in enumerate(tokens):
        row, col = tok.start
        if row not in lines or tok.end[0] != row or text[row - 1].lstrip().startswith(SKIP_STARTS):
            continue
        before = [t.string for t in tokens[:i] if t.start[0] == row]
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.type == tokenize.NUMBER and re.fullmatch(r"\d+", tok.string):
            out.append(Mutant(path, row, col, "int+1", tok.string, str(int(tok.string) + 1)))
        elif tok.type in (tokenize.OP, tokenize.NAME) and tok.string in SWAPS:
            if tok.string in ("+", "-") and (not before or before[-1] in "([{,=:" or before[-1] in ("return", "lambda")):
                continue  # unary: ``-1`` is a number, not an operation
            out.append(Mutant(path, row, col, tok.string, tok.string, SWAPS[tok.string]))
        elif tok.string == "not" and tok.type == tokenize.NAME and not (before and before[-1] in ("is",)):
            if before and before[-1] != "in" and after is not None and after.string == "in":
                out.append(Mutant(path, row, col, "not in", "not in", "in"))
            else:
                spaced = text[row - 1][col:col + 4] == "not "
                out.append(Mutant(path, row, col, "not", "not " if spaced else "not", ""))
        elif tok.string == "is" and tok.type == tokenize.NAME:
            negated = after is not None and after.string == "not"
            out.append(Mutant(path, row, col, "is not" if negated else "is", "is not" if negated else "is",
                              "is" if negated else "is not"))
        elif tok.string == "in" and tok.type == tokenize.NAME and "for" not in before and (not before or before[-1] != "not"):
            out.append(Mutant(path, row, col, "in", "in", "not in"))
    return out


COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
            ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Pass, ast.Global, ast.Nonlocal)


def omissions(path: str, source: str, lines: set[int]) -> list[Mutant]:
    """``--operators all``'s changes, the slips the token operators cannot make: a one-line statement left out
    (``pass`` in its place) and one keyword argument dropped from a call on a one-line statement."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt) or isinstance(node, COMPOUND) or node.lineno != node.end_lineno:
            continue
        if node.lineno not in lines or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            continue
        text = source.splitlines()[node.lineno - 1][node.col_offset:node.end_col_offset]
        out.append(Mutant(path, node.lineno, node.col_offset, "omit", text, "pass"))
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            for i, keyword in enumerate(call.keywords):
                if keyword.arg is None:
                    continue
                shorter = ast.parse(text.strip()).body[0]
                for inner in ast.walk(shorter):
                    if (isinstance(inner, ast.Call) and ast.dump(inner.func) == ast.dump(call.func)
                            and [k.arg for k in inner.keywords] == [k.arg for k in call.keywords]):
                        del inner.keywords[i]
                        break
                out.append(Mutant(path, node.lineno, node.col_offset, f"drop {keyword.arg}=", text, ast.unparse(shorter)))
    return out


def _char_col(line: str, byte_col: int) -> int:
    """ast's column (UTF-8 bytes) as a character index into ``line``."""
    return len(line.encode()[:byte_col].decode())


def _similar(name: str, others: set[str]) -> str | None:
    """The name in ``others`` most like ``name`` (a slip into another name that exists), or None."""
    close = difflib.get_close_matches(name, sorted(others - {name}), n=1, cutoff=0.6)
    return close[0] if close else None


def _locals(function: ast.AST) -> set[str]:
    """The names a function binds: its arguments and every name it stores."""
    names = {a.arg for a in ast.walk(function) if isinstance(a, ast.arg)}
    return names | {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


LITERALS = (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set)


def _swappable(a: ast.expr, b: ast.expr) -> bool:
    """Two arguments whose swap is a well-typed slip: different, and neither a literal (``open("rb", path)`` is a
    type error at once, not a slip a reviewer misses)."""
    return ast.dump(a) != ast.dump(b) and not isinstance(a, LITERALS) and not isinstance(b, LITERALS)


def _is_type_check(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in ("isinstance", "issubclass", "getattr", "hasattr",
                                                                "setattr")


def slips(path: str, source: str, lines: set[int]) -> list[Mutant]:
    """``--operators hand``'s changes, the well-typed slips the by-hand rounds planted and the token operators cannot
    make: a clause of ``and``/``or`` left out, two positional arguments swapped, two keyword arguments' values
    swapped (neither a literal), a slice's start and end swapped, a local name replaced by the most similar other
    local of its function, ``obj.attr`` read as data (not called) replaced by the most similar other attribute the
    module reads from a name of the same spelling."""
    tree = ast.parse(source)
    text = source.splitlines()
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    attributes: dict[str, set[str]] = {}  # per name, the attributes the module reads from it as data
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and id(node) not in called:
            attributes.setdefault(node.value.id, set()).add(node.attr)
    scope: dict[int, set[str]] = {}
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        bound = _locals(function)
        for node in ast.walk(function):
            scope[id(node)] = bound  # the innermost function wins: ast.walk visits outer functions first
    out = []

    def changed(node: ast.expr, operator: str, replacement: ast.expr) -> None:
        row = text[node.lineno - 1]
        col = _char_col(row, node.col_offset)
        old = row[col:_char_col(row, node.end_col_offset)]
        out.append(Mutant(path, node.lineno, col, operator, old, ast.unparse(replacement)))

    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or node.lineno != node.end_lineno or node.lineno not in lines:
            continue
        if text[node.lineno - 1].lstrip().startswith(SKIP_STARTS):
            continue
        if isinstance(node, ast.BoolOp):
            for i in range(len(node.values)):
                rest = node.values[:i] + node.values[i + 1:]
                changed(node, "drop clause", rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest))
        elif isinstance(node, ast.Call):
            for i in range(len(node.args) - 1 if not _is_type_check(node) else 0):
                a, b = node.args[i], node.args[i + 1]
                if _swappable(a, b) and not isinstance(a, ast.Starred) and not isinstance(b, ast.Starred):
                    args = list(node.args)
                    args[i], args[i + 1] = b, a
                    changed(node, "swap args", ast.Call(node.func, args, node.keywords))
            named = [k for k in node.keywords if k.arg is not None]
            for a, b in zip(named, named[1:]):
                if _swappable(a.value, b.value):
                    keywords = [ast.keyword(k.arg, b.value if k is a else a.value if k is b else k.value)
                                for k in node.keywords]
                    changed(node, f"swap {a.arg}=/{b.arg}=", ast.Call(node.func, node.args, keywords))
        elif isinstance(node, ast.Slice) and node.lower is not None and node.upper is not None:
            changed(node, "swap slice", ast.Slice(node.upper, node.lower, node.step))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in scope.get(id(node), ()):
            other = _similar(node.id, scope[id(node)])
            if other:
                changed(node, "other name", ast.Name(other, ast.Load()))
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name)
              and id(node) not in called):
            other = _similar(node.attr, attributes[node.value.id])
            if other:
                changed(node, "other attribute", ast.Attribute(node.value, other, ast.Load()))
    return out


def apply(source: str, mutant: Mutant) -> str:
    lines = source.splitlines(keepends=True)
    text = lines[mutant.line - 1]
    assert text[mutant.col:].startswith(mutant.old), (mutant, text)
    lines[mutant.line - 1] = text[:mutant.col] + mutant.new + text[mutant.col + len(mutant.old):]
    return "".join(lines)


def changes_the_tree(tree: str, mutated: str) -> bool:
    """Whether ``mutated`` parses to another tree than ``tree`` (the original's ``ast.dump``)."""
    try:
        return tree != ast.dump(ast.parse(mutated))
    except SyntaxError:
        return False


def sample(since: str, at: str, count: int, seed: int, operators: str = "tokens") -> list[Mutant]:
    """``count`` lines drawn with ``seed`` among those with a change at commit ``at``, one change drawn per line."""
    by_line: dict[tuple[str, int], list[Mutant]] = {}
    for path, lines in sorted(added_lines(since, at).items()):
        source = subprocess.run(["git", "show", f"{at}:{path}"], cwd=ROOT, check=True, capture_output=True,
                                text=True).stdout
        tree = ast.dump(ast.parse(source))
        if operators == "hand":
            found = slips(path, source, lines)
        else:
            found = candidates(path, source, lines) + (omissions(path, source, lines) if operators == "all" else [])
        for mutant in found:
            if changes_the_tree(tree, apply(source, mutant)):
                by_line.setdefault((mutant.file, mutant.line), []).append(mutant)
    rng = random.Random(seed)
    chosen = rng.sample(sorted(by_line), min(count, len(by_line)))
    print(f"{len(by_line)} added lines with a change in {len({f for f, _ in by_line})} modules; {len(chosen)} drawn "
          f"(seed {seed})", flush=True)
    return [rng.choice(by_line[key]) for key in chosen]


def read_planted(path: Path, at: str) -> list[Mutant]:
    """Changes planted by hand (``--planted``), each checked against the file at commit ``at``: ``old`` must occur
    exactly once on its line (or at ``col``), and the change must compile and change the syntax tree."""
    mutants = []
    for number, text in enumerate(Path(path).read_text().splitlines(), 1):
        if not text.strip():
            continue
        row = json.loads(text)
        source = subprocess.run(["git", "show", f"{at}:{row['file']}"], cwd=ROOT, check=True, capture_output=True,
                                text=True).stdout
        line = source.splitlines()[row["line"] - 1]
        col = row.get("col", line.find(row["old"]))
        if col < 0 or (row.get("col") is None and line.count(row["old"]) != 1):
            raise ValueError(f"line {number}: {row['old']!r} is not once on {row['file']}:{row['line']}")
        mutant = Mutant(row["file"], row["line"], col, "planted: " + row.get("why", ""), row["old"], row["new"])
        if not changes_the_tree(ast.dump(ast.parse(source)), apply(source, mutant)):
            raise ValueError(f"line {number}: the change does not compile or does not change the syntax tree")
        mutants.append(mutant)
    return mutants


def test_files(path: str, root: Path = ROOT) -> list[str]:
    """The test files under ``root`` that import the module at ``path``."""
    dotted = path[:-3].replace("/", ".").removesuffix(".__init__")
    package, _, name = dotted.rpartition(".")
    direct = re.compile(rf"\b{re.escape(dotted)}\b(?!\.\w)")
    named = re.compile(rf"from {re.escape(package)} import [^\n]*\b{re.escape(name)}\b|"
                       rf"from {re.escape(package)} import \([^)]*\b{re.escape(name)}\b")
    files = sorted(root.glob("tests/test_*.py"))
    found = [p for p in files if direct.search(p.read_text()) or named.search(p.read_text())]
    if not found:  # a module no test imports (a plugin loaded into a sandbox, say): the files that name it
        found = [p for p in files if re.search(rf"\b{re.escape(name)}\b", p.read_text())]
    return [f"tests/{p.name}" for p in found]


WIDER = ["tests", "-m", "not slow", "-n", "2", "--dist", "loadfile"]
"""``--wider``: a survivor of its targeted files runs again against every fast test (``make test-fast``)."""


def _pytest(args: list[str], worktree: Path, timeout: int) -> tuple[str, str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(worktree), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *args],
                              cwd=worktree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "caught (timeout)", "", []
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:]
    failing = [line.split(" ", 1)[1].split(" - ")[0] for line in done.stdout.splitlines()
               if line.startswith(("FAILED ", "ERROR "))]
    failed = (done.returncode == 1 or done.returncode in (3, 4)  # a test failed; the suite could not even start
              or (done.returncode == 2 and re.search(r"\b\d+ (failed|errors?)\b", tail)))  # -x under xdist stops with 2
    return ("survived" if done.returncode == 0 else "caught" if failed else f"error {done.returncode}"), tail, failing


BROKEN: list[str] = []
"""Tests found failing on the unchanged code in this round's worktree, deselected from the start for later mutants."""


def _caught_by(tests: list[str], target: Path, original: str, mutated: str, worktree: Path,
               timeout: int) -> tuple[str, str, list[str]]:
    """Run ``tests`` on the changed code; a test that fails is checked again on the unchanged code, and one that fails
    there too (a test that cannot pass in the worktree: a missing data folder, say) is deselected and the run made
    again. So a catch is a test that passes without the change and fails with it."""
    broken = [t for t in BROKEN if t.split("::")[0] in tests or tests[0] == WIDER[0]]
    while True:
        target.write_text(mutated)
        outcome, tail, failing = _pytest([*tests, *(f"--deselect={t}" for t in broken)], worktree, timeout)
        target.write_text(original)
        if not outcome.startswith("caught") or not failing:
            return outcome, tail, broken
        again, _, still = _pytest(failing, worktree, timeout)
        if again == "survived":
            return outcome, "; ".join([tail, *failing[:3]]), broken
        broken += still or failing
        BROKEN.extend(still or failing)
        if len(broken) > 5:
            return "error (tests fail without the change)", "; ".join(broken), broken


def restore_worktree(worktree: Path) -> list[str]:
    """Undo what a round stopped by SIGKILL left planted in its worktree (its ``finally`` did not run), before the
    round resumes there; returns the files restored."""
    changed = subprocess.run(["git", "diff", "--name-only"], cwd=worktree, capture_output=True, text=True,
                             check=True).stdout.split()
    if changed:
        subprocess.run(["git", "checkout", "--", *changed], cwd=worktree, check=True, capture_output=True)
    return changed


def run_one(mutant: Mutant, worktree: Path, timeout: int, wider: bool) -> dict:
    target = worktree / mutant.file
    original = target.read_text()
    mutated = apply(original, mutant)
    tests = test_files(mutant.file, worktree)
    started = time.monotonic()
    try:
        parallel = ["-n", "2", "--dist", "loadfile"] if len(tests) > 1 else []  # the module's files, on both cores
        outcome, tail, broken = _caught_by([*tests, *parallel] if tests else WIDER, target, original, mutated,
                                           worktree, timeout)
        if outcome == "survived" and wider and tests:
            outcome, tail, more = _caught_by(WIDER, target, original, mutated, worktree, timeout)
            broken += more
            outcome = "caught (wider)" if outcome == "caught" else outcome
    finally:
        target.write_text(original)
    return {**asdict(mutant), "key": mutant.key, "old_line": original.splitlines()[mutant.line - 1].strip(),
            "tests": tests or WIDER, "outcome": outcome, "pytest": tail, "failing_without_the_change": broken,
            "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", required=True, help="the commit the round's code is new since")
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--operators", choices=("tokens", "all", "hand"), default="tokens",
                        help="tokens: the one-token changes; all: also a statement left out and a keyword argument "
                             "dropped; hand: only the well-typed slips a person plants (a clause left out, arguments "
                             "or slice bounds swapped, a name or attribute replaced by a similar one that exists)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tests-at", default="HEAD", help="the commit whose tests (and code) the mutants run "
                        "against (default HEAD; a round resumed after new tests landed names its first commit)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per mutant before it counts as caught")
    parser.add_argument("--wider", action="store_true", help="run a survivor again against every fast test")
    parser.add_argument("--plan-only", action="store_true", help="write the drawn mutants (plan.jsonl) and stop")
    parser.add_argument("--planted", type=Path, help="run these changes instead of drawing: a JSON-lines file of "
                        "{file, line, old, new, why} planted by hand (old: the exact text on that line)")
    args = parser.parse_args(argv)
    commits = {}
    for flag, name in (("--since", args.since), ("--tests-at", args.tests_at)):
        found = subprocess.run(["git", "rev-parse", "--verify", "-q", f"{name}^{{commit}}"], cwd=ROOT,
                               capture_output=True, text=True)
        if found.returncode:
            print(f"mutants: {flag} {name}: not a commit of this repository", file=sys.stderr)
            return 2
        commits[flag] = found.stdout.strip()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background by a script
    args.out.mkdir(parents=True, exist_ok=True)
    if args.planted:
        try:
            mutants = read_planted(args.planted, commits["--tests-at"])
        except (OSError, ValueError) as err:
            print(f"mutants: --planted {args.planted}: {err}", file=sys.stderr)
            return 2
        args.operators = "hand-planted"
    else:
        mutants = sample(commits["--since"], commits["--tests-at"], args.count, args.seed, args.operators)
    with (args.out / "plan.jsonl").open("w") as f:
        for m in mutants:
            f.write(json.dumps({**asdict(m), "key": m.key, "since": commits["--since"],
                                "tests_at": commits["--tests-at"], "operators": args.operators}) + "\n")
    if args.plan_only:
        print(f"plan: {args.out / 'plan.jsonl'}")
        return 0
    ledger = args.out / "mutants.jsonl"
    done = {json.loads(line)["key"]: json.loads(line) for line in ledger.read_text().splitlines()} if ledger.exists() else {}
    worktree = args.out / "worktree"
    shared = ROOT.parent / "shared"
    if shared.is_dir() and not (args.out / "shared").exists():  # the tests read ../shared/data beside the checkout
        (args.out / "shared").symlink_to(shared)
    if not worktree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), commits["--tests-at"]], cwd=ROOT,
                       check=True, capture_output=True)
    for path in restore_worktree(worktree):
        print(f"mutants: {path} held a change a stopped round left; restored", file=sys.stderr)
    vllm = ROOT / ".venv-vllm" / "bin" / "python"
    if vllm.exists():
        os.environ.setdefault("SAO_ENV_VLLM_PYTHON", str(vllm))
    try:
        for i, mutant in enumerate(mutants, 1):
            if mutant.key in done:
                continue
            row = run_one(mutant, worktree, args.timeout, args.wider)
            done[mutant.key] = row
            with ledger.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"[{i}/{len(mutants)}] {row['outcome']:>9} {row['seconds']:6.1f} s  {mutant.file}:{mutant.line} "
                  f"{mutant.old!r} -> {mutant.new!r}  ({len(row['tests'])} test files)", flush=True)
    except KeyboardInterrupt:
        print(f"mutants: stopped; run the same command again to resume ({len(done)} of {len(mutants)} in {ledger})",
              file=sys.stderr)
        return 130
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, capture_output=True)
    rows = [done[m.key] for m in mutants]
    caught = sum(r["outcome"].startswith("caught") for r in rows)
    print(f"\ncaught {caught} of {len(rows)} ({100 * caught / len(rows):.0f} %)")
    for r in rows:
        if not r["outcome"].startswith("caught"):
            print(f"  {r['outcome']}: {r['file']}:{r['line']}  {r['old_line']}   [{r['old']!r} -> {r['new']!r}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
