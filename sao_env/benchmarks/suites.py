"""Benchmark suites: ``evals/<name>.yaml`` files, validated, found by name.

A suite names its loader and dataset (hub id or URL, split), the prompt template, the grader
and the decoding defaults (k samples per problem, temperature, top-p, max new tokens).
"""

from __future__ import annotations

import re
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sao_env.errors import UserError
from sao_env.specs import available, find_spec, parse_yaml, read_spec_text  # noqa: F401  (available, find_spec: re-exported)


# Fields each loader offers to the prompt template (the answer is never one of them).
PROMPT_FIELDS: dict[str, frozenset[str]] = {
    "beyond_aime": frozenset({"problem"}),
    "matharena": frozenset({"problem"}),
    "imo_answerbench": frozenset({"problem", "category"}),
    "swebench_verified": frozenset({"problem_statement", "repo", "base_commit", "instance_id", "hints_text"}),
}
GRADER_OF_LOADER = {
    "beyond_aime": "math",
    "matharena": "math",
    "imo_answerbench": "math",
    "swebench_verified": "swebench",
}
_PLACEHOLDER_RE = re.compile(r"\{(\w+)\}")


list_specs = available


class SuiteSpec(BaseModel):
    """One benchmark suite (``evals/<name>.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Suite name; equals the file name without ``.yaml``."""
    description: str = ""
    """One line shown by ``sao-env list``-style listings and in docs."""
    loader: Literal["beyond_aime", "matharena", "imo_answerbench", "swebench_verified"]
    """Which loader reads the rows (see sao_env/benchmarks/loaders.py)."""
    dataset: str
    """Hugging Face dataset id (or, for IMO-AnswerBench, the URL of the official CSV)."""
    split: str = "test"
    """Dataset split read from the hub."""
    revision: str = "main"
    """The dataset's revision: a commit of the hub dataset (``load_dataset(revision=...)``), or of
    the repository a URL ``dataset`` names (substituted for ``{revision}`` in it). ``main`` reads the
    current head (unpinned); recorded in provenance either way."""
    data_dirs: list[str] = Field(default_factory=list)
    """Sub-folders of a ``--data`` folder searched for this suite's file (e.g. ``hmmt/hmmt_feb_2025``)."""
    prompt_template: str
    """Prompt with ``{field}`` placeholders (the loader's fields); other braces, e.g. ``\\boxed{}``, stay."""
    grader: Literal["math", "swebench"]
    """Grader of the responses."""
    k: int = Field(1, ge=1, le=1024)
    """Samples per problem; accuracy is avg@k (pass@1 averaged over the k samples)."""
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    """Sampling temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_new_tokens: int = Field(32768, gt=0)
    """Longest response, in tokens."""
    reported_as: str = ""
    """How papers report this suite (e.g. ``avg@16``), for the record."""
    answer_fallback: Literal["none", "answer-is", "last-number"] = "none"
    """Math suites: where an answer may come from besides the last ``\\boxed{}`` (none: the box only,
    as MathArena grades; see sao_env/graders/math.py). Reported in every summary."""

    @model_validator(mode="after")
    def _check(self) -> "SuiteSpec":
        fields = PROMPT_FIELDS[self.loader]
        used = set(_PLACEHOLDER_RE.findall(self.prompt_template))
        unknown = used - fields
        if unknown:
            raise ValueError(
                f"prompt_template uses {sorted(unknown)}, but loader {self.loader!r} offers only {sorted(fields)}"
            )
        if not used:
            raise ValueError(f"prompt_template has no placeholder; loader {self.loader!r} offers {sorted(fields)}")
        if self.grader != "math" and self.answer_fallback != "none":
            raise ValueError(f"answer_fallback applies to math suites only, not to grader {self.grader!r}")
        if GRADER_OF_LOADER[self.loader] != self.grader:
            raise ValueError(f"loader {self.loader!r} needs grader {GRADER_OF_LOADER[self.loader]!r}, not {self.grader!r}")
        return self

    def render(self, fields: dict[str, object]) -> str:
        """Fill the template's ``{field}`` placeholders; other braces are left untouched."""
        return _PLACEHOLDER_RE.sub(lambda m: str(fields.get(m.group(1), "") or ""), self.prompt_template)


def load_suite(name: str) -> SuiteSpec:
    """Read and validate ``evals/<name>.yaml``; errors name the file and the field."""
    path = find_spec("evals", name)
    try:
        raw = parse_yaml(read_spec_text(path, "suite"))
    except yaml.YAMLError as err:
        raise UserError(f"{path}: invalid YAML: {str(err).splitlines()[0]}") from err
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping of suite fields")
    try:
        spec = SuiteSpec.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'suite'}: {e['msg']}" for e in err.errors())
        raise UserError(f"{path}: {problems}") from err
    if spec.name != path.stem and path.parent.name == "evals":
        raise UserError(f"{path}: name {spec.name!r} differs from the file name {path.stem!r}")
    return spec


def parse_suite_list(text: str) -> list[str]:
    """``"a,b , c"`` -> ``["a", "b", "c"]``; a UserError when empty."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError("--suite needs at least one suite name")
    return names
