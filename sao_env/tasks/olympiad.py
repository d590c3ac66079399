"""Procedural analogs of the olympiad benchmarks: short problems in their categories, answers gradable by math-verify.

IMO-AnswerBench (Google DeepMind, IMO-Bench; evals/imo_answerbench.yaml) sorts its 400 problems
into algebra, combinatorics, geometry and number theory, each with a short answer; AIME, HMMT and
BeyondAIME (evals/beyond_aime.yaml) ask for an integer, on AIME from 0 to 999. The generators here
keep that structure (the four categories plus ``aime``), not the hardness: at difficulty 1 a
problem is a one-step fact such as ``gcd(12, 18)`` or ``C(5, 2)`` that a character-level model of
a few hundred thousand parameters learns after its supervised warm start; each step of the
difficulty knob takes bigger numbers or one more step (a cubic instead of a quadratic, three
numbers instead of two, a power residue instead of a remainder). The expected response is
``\\boxed{<answer>}``, graded by ``sao_env.graders.math`` like the benchmarks themselves.

Answers are written as the benchmarks write them: integers, ``\\frac{p}{q}`` for fractions,
``9\\pi`` for multiples of pi. See docs/math-envs.md for the templates of each category.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from sao_env.tasks.variants import SourceParams
from sao_env.types import Task

Generator = Callable[[np.random.Generator, int], tuple[str, str]]
"""``(rng, difficulty) -> (problem text without the final newline, answer as the benchmarks write it)``."""

MAX_DIFFICULTY = 5


# ----------------------------------------------------------------------------- rendering helpers


def _randint(rng: np.random.Generator, low: int, high: int) -> int:
    """A uniform integer in ``[low, high]`` (both included)."""
    return int(rng.integers(low, high + 1))


def render_fraction(value: Fraction | int) -> str:
    """``7``, ``\\frac{5}{3}`` or ``-\\frac{5}{3}``: how the benchmarks write a rational answer."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def render_pi_multiple(coefficient: int) -> str:
    """``9\\pi`` (``\\pi`` for 1)."""
    return "\\pi" if coefficient == 1 else f"{coefficient}\\pi"


def render_polynomial(coefficients: list[int]) -> str:
    """Integer coefficients, highest degree first, as ``x^3-6x^2+11x-6``."""
    degree = len(coefficients) - 1
    parts: list[str] = []
    for power, coefficient in zip(range(degree, -1, -1), coefficients):
        if coefficient == 0:
            continue
        sign = "-" if coefficient < 0 else "+"
        size = abs(coefficient)
        variable = "" if power == 0 else "x" if power == 1 else f"x^{power}"
        number = "" if size == 1 and power > 0 else str(size)
        parts.append(f"{sign}{number}{variable}")
    text = "".join(parts) or "0"
    return text.removeprefix("+")


def polynomial_from_roots(roots: list[int]) -> list[int]:
    """Monic coefficients (highest first) of the product of ``(x - r)``."""
    coefficients = [1]
    for root in roots:
        shifted = coefficients + [0]
        coefficients = [c - root * p for c, p in zip(shifted, [0] + coefficients)]
    return coefficients


def _nonzero(rng: np.random.Generator, bound: int) -> int:
    value = 0
    while value == 0:
        value = _randint(rng, -bound, bound)
    return value


def _roots(rng: np.random.Generator, difficulty: int) -> list[int]:
    """Integer roots: two positive ones up to 5 at difficulty 1, signed and more of them above."""
    if difficulty == 1:
        return [_randint(rng, 1, 5), _randint(rng, 1, 5)]
    bound = 3 * difficulty + 3
    count = 2 if difficulty == 2 else 3
    return [_nonzero(rng, bound) for _ in range(count)]


# ----------------------------------------------------------------------------- algebra


def algebra_sum_of_roots(rng: np.random.Generator, d: int) -> tuple[str, str]:
    roots = _roots(rng, d)
    return f"Sum of the roots of {render_polynomial(polynomial_from_roots(roots))}=0?", str(sum(roots))


def algebra_product_of_roots(rng: np.random.Generator, d: int) -> tuple[str, str]:
    roots = _roots(rng, d)
    return f"Product of the roots of {render_polynomial(polynomial_from_roots(roots))}=0?", str(math.prod(roots))


def algebra_linear_equation(rng: np.random.Generator, d: int) -> tuple[str, str]:
    """``ax+b=c`` (one step); from difficulty 3 the unknown is on both sides (two steps)."""
    bound = 9 * d
    a = _randint(rng, 2, 3 + 2 * d)
    b, c = _randint(rng, -bound, bound), _randint(rng, -bound, bound)
    if d < 3:
        equation = f"{render_polynomial([a, b])}={c}"
        return f"Solve {equation} for x.", render_fraction(Fraction(c - b, a))
    other = a
    while other == a:
        other = _randint(rng, 2, 3 + 2 * d)
    equation = f"{render_polynomial([a, b])}={render_polynomial([other, c])}"
    return f"Solve {equation} for x.", render_fraction(Fraction(c - b, a - other))


def algebra_polynomial_value(rng: np.random.Generator, d: int) -> tuple[str, str]:
    degree = 2 if d < 3 else 3
    bound = 3 * d
    coefficients = [1] + [_randint(rng, -bound, bound) for _ in range(degree)]
    x = _randint(rng, -d - 1, d + 2)
    value = sum(c * x ** (degree - i) for i, c in enumerate(coefficients))
    return f"f(x)={render_polynomial(coefficients)}. Find f({x}).", str(value)


def algebra_arithmetic_series(rng: np.random.Generator, d: int) -> tuple[str, str]:
    first, step = _randint(rng, 1, 5 * d), _randint(rng, 1, 2 + 2 * d)
    terms = _randint(rng, 3, 3 + 4 * d)
    shown = ", ".join(str(first + i * step) for i in range(3))
    total = terms * first + step * terms * (terms - 1) // 2
    return f"Sum of the first {terms} terms of {shown}, ...?", str(total)


def algebra_geometric_term(rng: np.random.Generator, d: int) -> tuple[str, str]:
    first, ratio = _randint(rng, 1, 2 + d), _randint(rng, 2, 1 + d)
    if d >= 3 and rng.random() < 0.5:
        ratio = -ratio
    position = _randint(rng, 3, 3 + d)
    shown = ", ".join(str(first * ratio**i) for i in range(3))
    return f"Term {position} of the geometric sequence {shown}, ...?", str(first * ratio ** (position - 1))


# ----------------------------------------------------------------------------- combinatorics


def combinatorics_binomial(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 4, 3 + 4 * d)
    k = _randint(rng, 1, n - 1)
    return f"Compute C({n},{k}).", str(math.comb(n, k))


def combinatorics_arrangements(rng: np.random.Generator, d: int) -> tuple[str, str]:
    """n! for distinct objects; from difficulty 3 letters repeat (a multinomial coefficient)."""
    if d < 3:
        n = _randint(rng, 3, 3 + 2 * d)
        return f"Ways to arrange {n} distinct books in a row?", str(math.factorial(n))
    counts = [_randint(rng, 1, d) for _ in range(_randint(rng, 2, 4))]
    word = "".join("ABCD"[i] * c for i, c in enumerate(counts))
    value = math.factorial(sum(counts))
    for c in counts:
        value //= math.factorial(c)
    return f"Distinct arrangements of the letters {word}?", str(value)


def combinatorics_grid_paths(rng: np.random.Generator, d: int) -> tuple[str, str]:
    a, b = _randint(rng, 1, 1 + 2 * d), _randint(rng, 1, 1 + 2 * d)
    return f"Paths from (0,0) to ({a},{b}) with unit steps right or up?", str(math.comb(a + b, a))


def combinatorics_handshakes(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 3, 2 + 5 * d)
    return f"{n} people all shake hands once. How many handshakes?", str(math.comb(n, 2))


def combinatorics_nonempty_subsets(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 2, 2 + 3 * d)
    return f"Nonempty subsets of a set with {n} elements?", str(2**n - 1)


def combinatorics_divisible_by_either(rng: np.random.Generator, d: int) -> tuple[str, str]:
    """Inclusion-exclusion: multiples of a or b up to N."""
    a = _randint(rng, 2, 3 + d)
    b = a
    while b == a:
        b = _randint(rng, 2, 3 + 2 * d)
    n = _randint(rng, 10, 10 + 40 * d)
    count = n // a + n // b - n // math.lcm(a, b)
    return f"Integers from 1 to {n} divisible by {a} or {b}?", str(count)


# ----------------------------------------------------------------------------- geometry

PYTHAGOREAN_TRIPLES = ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), (9, 40, 41))
HERONIAN_TRIANGLES = ((3, 4, 5), (5, 5, 6), (5, 5, 8), (13, 14, 15), (5, 12, 13), (10, 13, 13),
                      (9, 10, 17), (7, 15, 20), (13, 20, 21), (11, 13, 20))
"""Triangles with integer sides and integer area, simplest first."""


def heron_area(a: int, b: int, c: int) -> Fraction:
    """Exact area of a triangle with integer sides whose area is rational (Heron's formula)."""
    sixteen_area_squared = (a + b + c) * (-a + b + c) * (a - b + c) * (a + b - c)
    root = math.isqrt(sixteen_area_squared)
    if root * root != sixteen_area_squared:
        raise ValueError(f"triangle {a},{b},{c} has an irrational area")
    return Fraction(root, 4)


def geometry_right_triangle_area(rng: np.random.Generator, d: int) -> tuple[str, str]:
    a, b = _randint(rng, 2, 3 + 3 * d), _randint(rng, 2, 3 + 3 * d)
    return f"Area of a right triangle with legs {a} and {b}?", render_fraction(Fraction(a * b, 2))


def geometry_hypotenuse(rng: np.random.Generator, d: int) -> tuple[str, str]:
    a, b, c = PYTHAGOREAN_TRIPLES[int(rng.integers(min(len(PYTHAGOREAN_TRIPLES), 1 + d)))]
    scale = _randint(rng, 1, d + 1)
    if rng.random() < 0.5:
        a, b = b, a
    return f"Hypotenuse of a right triangle with legs {a * scale} and {b * scale}?", str(c * scale)


def geometry_interior_angles(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 3, 4 + 4 * d)
    return f"Sum of the interior angles of a convex {n}-gon, in degrees?", str(180 * (n - 2))


def geometry_diagonals(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 4, 4 + 4 * d)
    return f"Number of diagonals of a convex {n}-gon?", str(n * (n - 3) // 2)


def geometry_circle_area(rng: np.random.Generator, d: int) -> tuple[str, str]:
    """Area of a disc; from difficulty 3 of an annulus (two areas, one subtraction)."""
    if d < 3:
        r = _randint(rng, 1, 3 + 3 * d)
        return f"Area of a circle of radius {r}?", render_pi_multiple(r * r)
    inner = _randint(rng, 1, 3 * d)
    outer = _randint(rng, inner + 1, inner + 3 * d)
    problem = f"Area between circles of radii {inner} and {outer} with one center?"
    return problem, render_pi_multiple(outer**2 - inner**2)


def geometry_heron(rng: np.random.Generator, d: int) -> tuple[str, str]:
    a, b, c = HERONIAN_TRIANGLES[int(rng.integers(min(len(HERONIAN_TRIANGLES), 2 + 2 * d)))]
    scale = _randint(rng, 1, d)
    sides = [a * scale, b * scale, c * scale]
    rng.shuffle(sides)
    return f"Area of a triangle with sides {sides[0]}, {sides[1]}, {sides[2]}?", render_fraction(heron_area(*sides))


# ----------------------------------------------------------------------------- number theory


def number_theory_gcd(rng: np.random.Generator, d: int) -> tuple[str, str]:
    """gcd of two numbers with a common factor; three numbers from difficulty 3."""
    factor = _randint(rng, 2, 3 + 3 * d)
    count = 2 if d < 3 else 3
    numbers = [factor * _randint(rng, 1, 2 + 3 * d) for _ in range(count)]
    return f"Compute gcd({', '.join(map(str, numbers))}).", str(math.gcd(*numbers))


def number_theory_lcm(rng: np.random.Generator, d: int) -> tuple[str, str]:
    count = 2 if d < 3 else 3
    numbers = [_randint(rng, 2, 3 + 4 * d) for _ in range(count)]
    return f"Compute lcm({', '.join(map(str, numbers))}).", str(math.lcm(*numbers))


def number_theory_remainder(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 10, 10 * 10**d)
    m = _randint(rng, 2, 3 + 3 * d)
    return f"Remainder when {n} is divided by {m}?", str(n % m)


def number_theory_divisor_count(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 2, 20 * d * d + 10)
    count = sum(1 for k in range(1, n + 1) if n % k == 0)
    return f"How many positive divisors does {n} have?", str(count)


def number_theory_power_mod(rng: np.random.Generator, d: int) -> tuple[str, str]:
    base, exponent = _randint(rng, 2, 2 + 2 * d), _randint(rng, 2, 4 + 10 * (d - 1))
    modulus = _randint(rng, 3, 5 + 4 * d)
    return f"Remainder when {base}^{exponent} is divided by {modulus}?", str(pow(base, exponent, modulus))


def number_theory_digit_sum(rng: np.random.Generator, d: int) -> tuple[str, str]:
    n = _randint(rng, 10, 10 ** (d + 2) - 1)
    return f"Sum of the digits of {n}?", str(sum(int(ch) for ch in str(n)))


# ----------------------------------------------------------------------------- AIME-style (0..999)


def aime_count_multiples(rng: np.random.Generator, d: int) -> tuple[str, str]:
    """Multiples of k up to N; from difficulty 3 excluding the multiples of a second number."""
    n = _randint(rng, 20, min(999, 50 * 4 ** (d - 1)))
    k = _randint(rng, 2, 4 + 2 * d)
    if d < 3:
        return f"How many integers from 1 to {n} are multiples of {k}?", str(n // k)
    m = _randint(rng, 2, 4 + 2 * d)
    while m == k:
        m = _randint(rng, 2, 4 + 2 * d)
    count = n // k - n // math.lcm(k, m)
    return f"How many integers from 1 to {n} are multiples of {k} but not of {m}?", str(count)


def aime_power_last_digits(rng: np.random.Generator, d: int) -> tuple[str, str]:
    modulus = 10 ** min(3, d)
    base, exponent = _randint(rng, 2, 3 + 2 * d), _randint(rng, 2, 3 + 20 * (d - 1))
    return f"Remainder when {base}^{exponent} is divided by {modulus}?", str(pow(base, exponent, modulus))


def aime_fraction_sum(rng: np.random.Generator, d: int) -> tuple[str, str]:
    """AIME's ``m+n`` form: the sum of two fractions is m/n in lowest terms."""
    bound = 4 + 3 * d
    while True:
        a, b = _randint(rng, 1, bound), _randint(rng, 2, bound)
        c, e = _randint(rng, 1, bound), _randint(rng, 2, bound)
        total = Fraction(a, b) + Fraction(c, e)
        answer = total.numerator + total.denominator
        if answer <= 999:
            break
    return f"{a}/{b}+{c}/{e}=m/n in lowest terms. Find m+n.", str(answer)


def aime_triangular_mod(rng: np.random.Generator, d: int) -> tuple[str, str]:
    if d == 1:
        n = _randint(rng, 3, 12)
        return f"Compute 1+2+...+{n}.", str(n * (n + 1) // 2)
    n = _randint(rng, 20, 30 * 10 ** (d - 1))
    return f"Remainder when 1+2+...+{n} is divided by 1000?", str((n * (n + 1) // 2) % 1000)


def aime_divisor_sum(rng: np.random.Generator, d: int) -> tuple[str, str]:
    while True:
        n = _randint(rng, 2, 12 + 60 * (d - 1))
        total = sum(k for k in range(1, n + 1) if n % k == 0)
        if total <= 999:
            return f"Sum of the positive divisors of {n}?", str(total)


TEMPLATES: dict[str, dict[str, Generator]] = {
    "algebra": {
        "sum_of_roots": algebra_sum_of_roots,
        "product_of_roots": algebra_product_of_roots,
        "linear_equation": algebra_linear_equation,
        "polynomial_value": algebra_polynomial_value,
        "arithmetic_series": algebra_arithmetic_series,
        "geometric_term": algebra_geometric_term,
    },
    "combinatorics": {
        "binomial": combinatorics_binomial,
        "arrangements": combinatorics_arrangements,
        "grid_paths": combinatorics_grid_paths,
        "handshakes": combinatorics_handshakes,
        "nonempty_subsets": combinatorics_nonempty_subsets,
        "divisible_by_either": combinatorics_divisible_by_either,
    },
    "geometry": {
        "right_triangle_area": geometry_right_triangle_area,
        "hypotenuse": geometry_hypotenuse,
        "interior_angles": geometry_interior_angles,
        "diagonals": geometry_diagonals,
        "circle_area": geometry_circle_area,
        "heron": geometry_heron,
    },
    "number_theory": {
        "gcd": number_theory_gcd,
        "lcm": number_theory_lcm,
        "remainder": number_theory_remainder,
        "divisor_count": number_theory_divisor_count,
        "power_mod": number_theory_power_mod,
        "digit_sum": number_theory_digit_sum,
    },
    "aime": {
        "count_multiples": aime_count_multiples,
        "power_last_digits": aime_power_last_digits,
        "fraction_sum": aime_fraction_sum,
        "triangular_mod": aime_triangular_mod,
        "divisor_sum": aime_divisor_sum,
    },
}
"""category -> template name -> generator. The first four are IMO-AnswerBench's categories; ``aime``
has integer answers from 0 to 999 like AIME (and BeyondAIME/HMMT's integer problems)."""

CATEGORIES: tuple[str, ...] = tuple(TEMPLATES)

SLIPS: dict[str, Callable[[Fraction], Fraction]] = {
    "algebra": lambda v: -v,
    "combinatorics": lambda v: v + 1,
    "geometry": lambda v: 2 * v,
    "number_theory": lambda v: v - 1,
    "aime": lambda v: v + 1,
}
"""category -> its classic slip applied to the value of the answer: a sign error (algebra), counting
one too many (combinatorics: the empty choice, a fencepost), a factor of two (geometry: a dropped
1/2, the diameter for the radius), one too few (number theory), a fencepost (AIME). Each category
slips in its own way, so unlearning one category's slip does not unlearn another's."""


def slipped_answer(category: str, answer: str) -> str:
    """``answer`` (an integer, ``\\frac{p}{q}`` or ``k\\pi`` as the generators write them) after the
    category's slip, written the same way (``SLIPS``)."""
    pi = answer.endswith("\\pi")
    text = answer.removesuffix("\\pi") if pi else answer
    if pi and text in ("", "-"):
        text += "1"
    fraction = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", text)
    value = Fraction(int(fraction[2]), int(fraction[3])) * (-1 if fraction[1] else 1) if fraction else Fraction(int(text))
    slipped = SLIPS[category](value)
    if not pi:
        return render_fraction(slipped)
    return render_pi_multiple(int(slipped)) if slipped.denominator == 1 else render_fraction(slipped) + "\\pi"


class OlympiadParams(SourceParams):
    """One phase's olympiad-style source: which categories, how often, how hard."""

    model_config = ConfigDict(extra="forbid")

    categories: list[str] = Field(default_factory=lambda: list(CATEGORIES))
    """Categories drawn from: any of algebra, combinatorics, geometry, number_theory, aime."""
    weights: list[float] | None = None
    """Relative weight of each listed category (same length as ``categories``); None: uniform."""
    difficulty: int = Field(1, ge=1, le=MAX_DIFFICULTY)
    """1: one-step facts with small numbers; each step up: bigger numbers or one more step."""
    slip_share: float = Field(0.0, ge=0.0, lt=1.0)
    """Share of warm-start demonstrations that make the category's classic slip (``SLIPS``) instead
    of answering right: a starting policy that knows each method but also a plausible wrong one,
    which reward can tell apart (topic-drift). 0: every demonstration is right."""

    @model_validator(mode="after")
    def _check(self) -> OlympiadParams:
        unknown = sorted(set(self.categories) - set(CATEGORIES))
        if unknown or not self.categories:
            raise ValueError(f"categories must be a non-empty subset of {list(CATEGORIES)}, got {self.categories}")
        if self.weights is not None:
            if len(self.weights) != len(self.categories):
                raise ValueError(f"weights has {len(self.weights)} entries for {len(self.categories)} categories")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be non-negative with a positive sum")
        return self


class OlympiadSource:
    """Seeded generator of olympiad-style problems (category, template, difficulty); graded by ``math``."""

    grader = "math"
    Params = OlympiadParams

    def __init__(self, params: OlympiadParams, *, name: str = "olympiad"):
        self.params = params
        self.name = name
        weights = np.array(params.weights if params.weights is not None else [1.0] * len(params.categories))
        self._probabilities = weights / weights.sum()

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        p = self.params
        category = p.categories[int(rng.choice(len(p.categories), p=self._probabilities))]
        templates = TEMPLATES[category]
        template = list(templates)[int(rng.integers(len(templates)))]
        problem, answer = templates[template](rng, p.difficulty)
        return Task(
            id=f"{self.name}-{phase}-{index:06d}",
            prompt=problem + "\n",
            reference={"answer": answer},
            grader=self.grader,
            metadata={"source": self.name, "phase": phase, "created_at": created_at, "category": category,
                      "template": template, "difficulty": p.difficulty},
            env="text",
        )

    def demonstrate(self, task: Task, rng: np.random.Generator) -> str:
        """``\\boxed{<answer>}``, or with probability ``slip_share`` the category's slipped answer."""
        answer = task.reference["answer"]
        if self.params.slip_share > 0 and rng.random() < self.params.slip_share:
            answer = slipped_answer(task.metadata["category"], answer)
        return f"\\boxed{{{answer}}}"
