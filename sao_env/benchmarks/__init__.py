"""Benchmark evaluation: suites (evals/*.yaml), loaders, generation backends, metrics, outputs.

Public API (see docs/benchmarks.md):

- suites: ``load_suite(name)``, ``find_spec(kind, name)``, ``SuiteSpec``
- loaders: ``BeyondAIME``, ``MathArena``, ``IMOAnswerBench``, ``SWEBenchVerified``, ``make_loader``
- backends: ``make_backend(name, model, ...)`` -> ``generate(prompts, n, ...) -> Generations``
- metrics: ``avg_at_k``, ``pass_at_k``, ``confidence_interval_95`` (sao_env.benchmarks.metrics)
- running: ``run_eval``, ``run_grade`` (sao_env.benchmarks.runner)
"""

from sao_env.benchmarks.loaders import (
    LOADERS,
    BeyondAIME,
    IMOAnswerBench,
    MathArena,
    SWEBenchVerified,
    make_loader,
)
from sao_env.benchmarks.suites import SuiteSpec, find_spec, list_specs, load_suite

__all__ = [
    "LOADERS", "BeyondAIME", "IMOAnswerBench", "MathArena", "SWEBenchVerified", "make_loader",
    "SuiteSpec", "find_spec", "list_specs", "load_suite",
]
