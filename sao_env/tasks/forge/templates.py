"""The function templates the forge builds repositories from.

A template is one short function: its parameters, a docstring and one or two body lines, with
placeholders for constants (``{k}``, ``{sep}`` ...) and for a call to another function of the
repository (``{call}``; its name goes into the docstring as ``{callee}``). A generated function
fills the placeholders with drawn values and a drawn name; renaming it later (drift) changes only
the name, so its callers and tests follow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

WORDS = ("Go", "ab-cd", "Moon", "x_y_z", "tea", "Data-Set", "hello", "a-b", "Kite_run", "zed", "Pi-e", "oboe")
"""String arguments of tests and issues: mixed case, with '-' and '_' so replacements and counts bite."""


@dataclass(frozen=True)
class Template:
    """One kind of function.

    Attributes:
        family: ``"int"`` (integer helpers, callable from compose functions), ``"str"`` or ``"compose"``.
        names: the names a function of this kind may get (drawn; renames draw an unused one).
        params: parameter names, in order.
        args: how to draw each parameter's test argument: ``int`` (0..12), ``pos`` (1..4),
            ``low`` (0..5), ``high`` (6..12), ``width`` (3..9) or ``word`` (from ``WORDS``).
        doc: the docstring, with the constant placeholders (and ``{callee}``).
        body: the body lines (without indentation).
        consts: placeholder -> the values it is drawn from.
        promotable: an int placeholder that a signature-change drift may turn into a keyword
            parameter (named ``promoted_name``) whose default is the constant.
        callee_arity: for compose templates, the number of int arguments the called function takes.
    """

    family: str
    names: tuple[str, ...]
    params: tuple[str, ...]
    args: tuple[str, ...]
    doc: str
    body: tuple[str, ...]
    consts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    promotable: str | None = None
    promoted_name: str = ""
    callee_arity: int = 0

    def draw_consts(self, rng: random.Random) -> tuple[tuple[str, str], ...]:
        return tuple((name, rng.choice(values)) for name, values in self.consts)

    def draw_args(self, rng: random.Random) -> str:
        """One argument list as Python source, e.g. ``"3, 'Go'"``."""
        return ", ".join(repr(_draw_arg(kind, rng)) for kind in self.args)


def _ints(low: int, high: int) -> tuple[str, ...]:
    return tuple(str(v) for v in range(low, high + 1))


def _draw_arg(kind: str, rng: random.Random) -> int | str:
    if kind == "int":
        return rng.randint(0, 12)
    if kind == "pos":
        return rng.randint(1, 4)
    if kind == "low":
        return rng.randint(0, 5)
    if kind == "high":
        return rng.randint(6, 12)
    if kind == "width":
        return rng.randint(3, 9)
    if kind == "word":
        return rng.choice(WORDS)
    raise ValueError(f"unknown argument kind {kind!r}")


TEMPLATES: dict[str, Template] = {
    "product": Template("int", ("scale", "times", "multiply", "product"), ("a", "b"), ("int", "int"),
                        "Return a times b.", ("return a * b",)),
    "shift": Template("int", ("shift", "offset", "bump", "nudge"), ("x",), ("int",),
                      "Return x plus {k}.", ("return x + {k}",), (("k", _ints(2, 9)),), "k", "step"),
    "series": Template("int", ("series", "triangle", "accumulate", "running"), ("n",), ("int",),
                       "Return 0 + 1 + ... + n.", ("return sum(range(n + 1))",)),
    "gap": Template("int", ("gap", "distance", "delta", "minus"), ("a", "b"), ("int", "int"),
                    "Return a minus b.", ("return a - b",)),
    "clamp": Template("int", ("clamp", "bound", "limit", "cap"), ("x",), ("int",),
                      "Return x kept within 0..{k}.", ("return max(0, min(x, {k}))",),
                      (("k", _ints(5, 10)),), "k", "top"),
    "groups": Template("int", ("groups", "buckets", "chunks", "batches"), ("n",), ("int",),
                       "Return how many groups of {k} fit in n.", ("return n // {k}",),
                       (("k", _ints(2, 5)),), "k", "size"),
    "span": Template("int", ("span", "span_sum", "between", "stretch"), ("lo", "hi"), ("low", "high"),
                     "Return lo + ... + (hi - 1).", ("return sum(range(lo, hi))",)),
    "power": Template("int", ("power", "raise_to", "exponent", "lift"), ("x",), ("int",),
                      "Return x to the power {k}.", ("return pow(x, {k})",), (("k", _ints(2, 3)),), "k", "exp"),
    "at_least": Template("int", ("at_least", "exceeds", "is_big", "reaches"), ("x",), ("int",),
                         "Return True when x is at least {k}.", ("return x >= {k}",), (("k", _ints(3, 9)),)),
    "weigh": Template("int", ("weigh", "score", "blend", "mix"), ("a", "b"), ("int", "int"),
                      "Return {k} * a + b.", ("base = a * {k}", "return base + b"),
                      (("k", _ints(2, 6)),), "k", "factor"),
    "modulo": Template("int", ("modulo", "wrap", "cycle", "remainder"), ("n",), ("int",),
                       "Return n modulo {k}.", ("return n % {k}",), (("k", _ints(3, 7)),), "k", "base"),
    "tag": Template("str", ("tag", "bracket", "wrap_in", "enclose"), ("s",), ("word",),
                    "Return s in brackets.", ('return "[" + s + "]"',)),
    "head": Template("str", ("head", "prefix", "initials", "front"), ("s",), ("word",),
                     "Return the first {k} characters of s.", ("return s[:{k}]",), (("k", _ints(2, 4)),)),
    "shout": Template("str", ("shout", "loud", "capitals", "yell"), ("s",), ("word",),
                      "Return s in capitals.", ("return s.upper()",)),
    "join": Template("str", ("join", "glue", "link", "pair"), ("a", "b"), ("word", "word"),
                     "Return a and b joined by '{sep}'.", ('return a + "{sep}" + b',),
                     (("sep", ("-", ":", "/")),)),
    "repeat": Template("str", ("repeat", "echo", "stamp", "copies"), ("s", "n"), ("word", "pos"),
                       "Return s repeated n times.", ("return s * n",)),
    "clean": Template("str", ("clean", "tidy", "scrub", "swap_marks"), ("s",), ("word",),
                      "Return s with '{a}' replaced by '{b}'.", ('return s.replace("{a}", "{b}")',),
                      (("a", ("-", "_")), ("b", (".", ":")))),
    "pad": Template("str", ("pad", "widen", "fill", "align"), ("s", "n"), ("word", "width"),
                    "Return s right-aligned to n characters with '{c}'.", ('return s.rjust(n, "{c}")',),
                    (("c", ("*", ".", "#")),)),
    "count": Template("str", ("count", "occurrences", "tally", "hits"), ("s",), ("word",),
                      "Return how often '{c}' occurs in s.", ('return s.count("{c}")',),
                      (("c", ("a", "e", "o", "-")),)),
    "tail": Template("str", ("tail", "suffix", "ending", "last"), ("s",), ("word",),
                     "Return the last {k} characters of s.", ("return s[-{k}:]",), (("k", _ints(2, 3)),)),
    "then_add": Template("compose", ("adjusted", "then_add", "plus_after", "raised"), ("x",), ("int",),
                         "Return {callee}(x) plus {k}.", ("return {call}(x) + {k}",),
                         (("k", _ints(1, 5)),), callee_arity=1),
    "then_scale": Template("compose", ("scaled", "amplified", "doubled_up", "boosted"), ("a", "b"),
                           ("int", "int"), "Return {k} times {callee}(a, b).", ("return {call}(a, b) * {k}",),
                           (("k", _ints(2, 4)),), callee_arity=2),
    "of_length": Template("compose", ("of_length", "by_size", "measured", "sized"), ("s",), ("word",),
                          "Return {callee} of the length of s.", ("return {call}(len(s))",), callee_arity=1),
}
"""Template id -> template. Every name is distinct across templates (a repository never holds two
functions of one name)."""

INT_TEMPLATES = tuple(t for t, spec in TEMPLATES.items() if spec.family == "int")
STR_TEMPLATES = tuple(t for t, spec in TEMPLATES.items() if spec.family == "str")
COMPOSE_TEMPLATES = tuple(t for t, spec in TEMPLATES.items() if spec.family == "compose")
