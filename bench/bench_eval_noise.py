"""The held-out evaluation's own noise, per scenario: the same weights evaluated under K seeds' streams.

The sampling streams are keyed by the run's seed (evaluation versions 2 and 3; under version 2 the held-out
tasks too, under version 3, the default, every seed meets the scenario's one set), so the seed-to-seed spread
of an evaluation metric (AUC, recovery time) holds the evaluation's sampling noise as well as the runs' own.
This script measures that noise: it evaluates one policy (the
scenario's warm start, or ``--policy DIR``, a run's ``checkpoints/final``) at one time point under
the streams of K seeds and reports, per phase, the mean accuracy, its standard deviation over the K
streams and the binomial one (sqrt(p(1-p)/n) for n prompts). From the per-phase variances it states
the standard deviation that the evaluation alone adds to a run's AUC, the trapezoid mean of the
current phase's accuracy over the evaluation schedule (sao_env/evaluation/adaptation.py)::

    sd_eval(AUC) = sqrt(sum_i w_i^2 var(phase at t_i)),   w_i the trapezoid weights (sum 1)

since each evaluation draws independent streams. It is set beside the seed-to-seed standard
deviation of AUC within recipes on the committed board (``leaderboards/<env>-runs.csv``), whose
runs may be of evaluation version 1 (their spread then holds no evaluation noise at all). For the goal
that the evaluation add at most a third of the seeds' sd (sd_seeds² = sd_rest² + sd_eval², so sd_eval <=
sd_rest / sqrt(8)) it prints the prompts per phase that reach it, sd_rest taken from the board (its sd
less the evaluation's where the board's runs carry it, version 2 or later) or given (``--rest-sd``).

    python bench/bench_eval_noise.py                       # the four CPU scenarios, 8 streams
    python bench/bench_eval_noise.py --scenarios style-drift --streams 16 --policy runs/.../checkpoints/final
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import sao_env  # noqa: F401  (pins the numerics before torch and numpy load)
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def eval_times(duration_s: float, interval_s: float) -> list[float]:
    """The run's evaluation schedule (sao_env/experiment/run.py): every ``interval_s`` from 0, and the end."""
    return [float(t) for t in np.arange(0.0, duration_s, interval_s)] + [float(duration_s)]


def trapezoid_weights(times: list[float]) -> np.ndarray:
    """Weights w_i with AUC = sum_i w_i a_i for the trapezoid mean over ``times`` (they sum to 1)."""
    t = np.asarray(times, dtype=float)
    w = np.zeros(len(t))
    gaps = np.diff(t)
    w[:-1] += gaps / 2
    w[1:] += gaps / 2
    return w / (t[-1] - t[0])


def auc_sd_from_phases(times: list[float], phase_of: list[str], variance: dict[str, float]) -> float:
    """Standard deviation that independent evaluation noise (``variance`` per phase) adds to the AUC."""
    w = trapezoid_weights(times)
    return float(math.sqrt(sum(wi ** 2 * variance[p] for wi, p in zip(w, phase_of))))


def board_auc_sd(env: str) -> tuple[float, int, str]:
    """Pooled within-recipe standard deviation of AUC over seeds on the committed board, its degrees of
    freedom and the evaluation version of its runs (NaN, 0, '' without a board)."""
    path = REPO / "leaderboards" / f"{env}-runs.csv"
    if not path.is_file():
        return math.nan, 0, ""
    runs = pd.read_csv(path)
    ss, df = 0.0, 0
    for _, group in runs.groupby("recipe"):
        values = group["auc"].dropna()
        if len(values) >= 2:
            ss += float(((values - values.mean()) ** 2).sum())
            df += len(values) - 1
    version = str(int(runs["eval_version"].max())) if "eval_version" in runs else "1"
    return (math.sqrt(ss / df) if df else math.nan), df, version


def measure(env: str, streams: int, policy_dir: str | None) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sao_env.envs.text_env import load_scenario
    from sao_env.evaluation.heldout import evaluate_heldout
    from sao_env.experiment import resolve_config
    from sao_env.policy.warmstart import load_warm_started
    from sao_env.scenario import Scenario

    torch.set_num_threads(1)
    base = load_scenario(env)
    if policy_dir:
        model, tok = AutoModelForCausalLM.from_pretrained(policy_dir), AutoTokenizer.from_pretrained(policy_dir)
        label = policy_dir
    else:
        model, tok, _ = load_warm_started(resolve_config(env, "sao").agent.model, base, show_progress=False)
        label = "warm start"
    model.eval()
    per_phase: dict[str, list[float]] = {}
    start = time.perf_counter()
    for seed in range(streams):
        result = evaluate_heldout(model, tok, Scenario(base.spec, seed=seed), eval_key=0)
        for phase in base.eval_sets:
            per_phase.setdefault(phase, []).append(result[f"eval/{phase}/accuracy"])
    seconds = time.perf_counter() - start
    n = base.spec.eval.prompts_per_phase
    variance = {p: float(np.var(v, ddof=1)) for p, v in per_phase.items()}
    times = eval_times(base.duration_s, base.spec.eval.interval_h * 3600)
    phase_of = [base.phase_at(min(t, base.duration_s - 1e-9)).name for t in times]
    auc_sd = auc_sd_from_phases(times, phase_of, variance)
    seed_sd, df, version = board_auc_sd(env)
    rows = []
    for phase, values in per_phase.items():
        p = float(np.mean(values))
        rows.append({"scenario": env, "policy": label, "phase": phase, "prompts": n, "streams": streams,
                     "accuracy": p, "sd_streams": math.sqrt(variance[phase]), "sd_binomial": math.sqrt(p * (1 - p) / n),
                     "auc_sd_eval": auc_sd, "auc_sd_seeds": seed_sd, "auc_sd_seeds_df": df, "board_eval_version": version,
                     "evaluations": len(times), "seconds": seconds})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="style-drift,topic-drift,tool-drift,codebase-drift")
    parser.add_argument("--streams", type=int, default=8, help="seeds whose evaluation streams are drawn (K)")
    parser.add_argument("--policy", default=None, help="a saved policy folder (default: each scenario's warm start)")
    parser.add_argument("--rest-sd", default="", help="seeds' sd of AUC without the evaluation, per scenario "
                        "(ENV=SD,...; default: from the committed board)")
    args = parser.parse_args(argv)
    if args.streams < 2:
        print("--streams must be at least 2", file=sys.stderr)
        return 2
    rows = []
    for env in args.scenarios.split(","):
        print(f"{env}: {args.streams} streams ...", file=sys.stderr, flush=True)
        rows += measure(env, args.streams, args.policy)
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(table.drop(columns=["policy"]).to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    rest_sd = dict(item.split("=") for item in args.rest_sd.split(",")) if args.rest_sd else {}
    for env, part in table.groupby("scenario", sort=False):
        first = part.iloc[0]
        print(f"{env}: the evaluation adds sd {first.auc_sd_eval:.4f} to a run's AUC ({first.evaluations} evaluations, "
              f"{first.prompts} prompts per phase); seed-to-seed sd of AUC on the committed board "
              f"{first.auc_sd_seeds:.4f} (df {first.auc_sd_seeds_df}, evaluation version {first.board_eval_version or '-'})")
        rest = float(rest_sd[env]) if env in rest_sd else rest_of_seeds_sd(first.auc_sd_seeds, first.auc_sd_eval,
                                                                          first.board_eval_version)
        needed = prompts_for_a_third(first.auc_sd_eval, int(first.prompts), rest)
        print(f"{env}: at most a third of the seeds' sd (sd without the evaluation {rest:.4f}) takes "
              f"{needed} prompts per phase" if needed else f"{env}: no seeds' sd to size against")
    return 0


def rest_of_seeds_sd(board_sd: float, eval_sd: float, version: str) -> float:
    """The seeds' sd of AUC without the evaluation's own noise: the board's as it is for version 1 (its seeds
    shared the evaluation's streams), sqrt(board² - eval²) for later versions (NaN when the evaluation's exceeds it)."""
    if version in ("", "1"):
        return board_sd
    return math.sqrt(board_sd ** 2 - eval_sd ** 2) if board_sd > eval_sd else math.nan


def prompts_for_a_third(eval_sd: float, prompts: int, rest_sd: float) -> int | None:
    """Prompts per phase at which the evaluation's sd (falling as 1/sqrt(prompts)) is at most a third of the seeds'
    sd, sd_seeds = sqrt(rest² + eval²): eval <= rest / sqrt(8). None without a finite positive ``rest_sd``."""
    if not (rest_sd > 0 and math.isfinite(rest_sd)):
        return None
    return max(prompts, math.ceil(prompts * (eval_sd / (rest_sd / math.sqrt(8))) ** 2))


if __name__ == "__main__":
    sys.exit(main())
