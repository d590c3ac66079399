"""Bug injection in the manner of SWE-smith: one-line mutations of a function body.

Kinds (``BUG_KINDS``):

- ``operator_swap``: a binary operator becomes another (``+`` -> ``-``, ``*`` -> ``+``,
  ``//`` -> ``%``, ``>=`` -> ``>`` ...), or a slice flips (``s[:3]`` -> ``s[3:]``).
- ``off_by_one``: an integer literal moves by one (``range(n + 1)`` -> ``range(n + 2)``,
  ``s[:3]`` -> ``s[:2]``).
- ``wrong_constant``: an integer literal moves by two or more, or a string literal changes
  (``"-"`` -> ``"_"``).
- ``wrong_call``: a call names a different function: a builtin (``min`` <-> ``max``), a method
  (``upper`` <-> ``lower``) or another function of the repository with the same arity.
- ``swapped_args``: the two arguments of a call (``pow(x, 3)`` -> ``pow(3, x)``) or the operands
  of an operator (``a - b`` -> ``b - a``, ``"[" + s`` -> ``s + "["``) trade places.

``candidates`` lists every mutation of a line for a kind; the instance builder keeps the first
(in seeded order) that changes the function's behaviour on some input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

BUG_KINDS = ("operator_swap", "off_by_one", "wrong_constant", "wrong_call", "swapped_args")

OPERATOR_SWAPS = {"+": "-", "-": "+", "*": "+", "//": "%", "%": "//", ">=": ">", "<=": "<", ">": ">=",
                  "<": "<=", "==": "!="}
BUILTIN_SWAPS = {"min": "max", "max": "min", "sum": "len", "pow": "max", "len": "sum"}
METHOD_SWAPS = {"upper": "lower", "lower": "upper", "rjust": "ljust", "ljust": "rjust", "count": "find",
                "replace": "count"}
STRING_SWAPS = {"[": "(", "]": ")", "-": "_", "_": "-", ":": ";", "/": "|", ".": ",", "*": "#", "#": "*",
                "a": "o", "e": "i", "o": "a"}

_OPERATOR = re.compile(r"(?<= )(//|>=|<=|==|[-+*%<>])(?= )")
_INT = re.compile(r"(?<![\w.\"'])\d+(?![\w.\"'])")
_STRING = re.compile(r'"([^"]*)"')
_CALL = re.compile(r"(?<![\w.])(?:(\w+)\.)?(\w+)\(")
_METHOD = re.compile(r"(?<=[\w\]\)])\.(\w+)\(")
_TWO_ARGS = re.compile(r"\(([^(),]+), ([^(),=]+)\)")
_LEFT = re.compile(r'(?<![\w.\"])(\w+|"[^"]*") $')
_RIGHT = re.compile(r'^ (\w+|"[^"]*")(?![\w.(\"\[])')
_SLICE = re.compile(r"\[(-?)(:?)(\w+)(:?)\]")


def _sub(line: str, match: re.Match, text: str, group: int = 0) -> str:
    return line[: match.start(group)] + text + line[match.end(group):]


def candidates(line: str, kind: str, functions: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Every mutated version of ``line`` (a function body line, indentation included) for ``kind``.

    ``functions`` maps module name -> {function name: arity} (for ``wrong_call`` between the
    repository's own functions; a bare name refers to the line's own module under key ``""``).
    """
    indent = line[: len(line) - len(line.lstrip())]
    code = line[len(indent):]
    out: list[str] = []
    if kind == "operator_swap":
        out = [_sub(code, m, OPERATOR_SWAPS[m.group(1)], 1) for m in _OPERATOR.finditer(code)]
        for m in _SLICE.finditer(code):
            sign, before, bound, after = m.groups()
            if before != after:
                out.append(_sub(code, m, f"[{sign}{bound}:]" if before else f"[:{sign}{bound}]"))
    elif kind == "off_by_one":
        for m in _INT.finditer(code):
            value = int(m.group())
            out += [_sub(code, m, str(v)) for v in (value + 1, value - 1) if v >= 0]
    elif kind == "wrong_constant":
        for m in _INT.finditer(code):
            value = int(m.group())
            out += [_sub(code, m, str(v)) for v in (value + 2, value + 3, value * 2 + 1, value - 2) if v >= 0]
        for m in _STRING.finditer(code):
            text = m.group(1)
            if text:
                swapped = "".join(STRING_SWAPS.get(ch, ch) for ch in text)
                out.append(_sub(code, m, swapped if swapped != text else text + "?", 1))
    elif kind == "wrong_call":
        for m in _METHOD.finditer(code):
            if m.group(1) in METHOD_SWAPS:
                out.append(_sub(code, m, METHOD_SWAPS[m.group(1)], 1))
        for m in _CALL.finditer(code):
            owner, name = m.group(1), m.group(2)
            if owner is None and name in BUILTIN_SWAPS:
                out.append(_sub(code, m, BUILTIN_SWAPS[name], 2))
                continue
            siblings = functions.get(owner or "", {})
            if name in siblings:
                out += [_sub(code, m, other, 2) for other, arity in siblings.items()
                        if other != name and arity == siblings[name]]
    elif kind == "swapped_args":
        for m in _TWO_ARGS.finditer(code):
            first, second = m.group(1), m.group(2)
            if first.strip() != second.strip():
                out.append(_sub(code, m, f"({second}, {first})"))
        for m in _OPERATOR.finditer(code):
            left, right = _LEFT.search(code[: m.start()]), _RIGHT.search(code[m.end():])
            if m.group(1) in ("+", "-", "//", "%") and left and right and left.group(1) != right.group(1):
                out.append(code[: left.start(1)] + f"{right.group(1)} {m.group(1)} {left.group(1)}"
                           + code[m.end() + right.end(1):])
    else:
        raise ValueError(f"unknown bug kind {kind!r}; known: {', '.join(BUG_KINDS)}")
    return [indent + c for c in dict.fromkeys(out) if c != code]
