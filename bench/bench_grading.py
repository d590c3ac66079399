"""Math grading throughput on the real benchmark rows (answers per second).

Every gold answer of BeyondAIME, HMMT (Feb 2025, Feb 2024, Nov 2025) and IMO-AnswerBench is graded
twice, written back correctly in a box after some text and written wrongly (the integer plus one,
or the expression "+ 1"), shuffled together, through ``grade_math_batch`` and its worker pool.

    python bench/bench_grading.py [--data ../shared/data] [--workers 2] [--repeats 3]

Prints the pool start-up time, then answers per second for each repeat (warm pool, caches of
parsed gold answers already filled after the first repeat) and the reasons counted.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import time
from collections import Counter
from pathlib import Path


def load_golds(data: Path) -> list[str]:
    golds = []
    for relative in ("beyondaime/test.jsonl", "hmmt/hmmt_feb_2025/train.jsonl",
                     "hmmt/hmmt_feb_2024/train.jsonl", "hmmt/hmmt_nov_2025/train.jsonl"):
        with (data / relative).open(encoding="utf-8") as handle:
            golds += [str(json.loads(line)["answer"]) for line in handle if line.strip()]
    with (data / "imo_answerbench" / "answerbench_v2.csv").open(newline="", encoding="utf-8") as handle:
        golds += [row["Short Answer"].strip() for row in csv.DictReader(handle)]
    return golds


def make_pairs(golds: list[str], seed: int = 0) -> list[tuple[str, str]]:
    pairs = []
    for gold in golds:
        written = gold.replace("$", "").strip()
        pairs.append((gold, f"Let us compute carefully.\n\nThe final answer is $\\boxed{{{written}}}$."))
        wrong = str(int(gold) + 1) if gold.lstrip("-").isdigit() else written + " + 1"
        pairs.append((gold, f"Let us compute carefully.\n\nThe final answer is $\\boxed{{{wrong}}}$."))
    random.Random(seed).shuffle(pairs)
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()

    from sao_env.graders.math import get_pool, grade_math_batch

    pairs = make_pairs(load_golds(args.data))
    started = time.perf_counter()
    grade_math_batch([("1", "\\boxed{1}")], workers=args.workers)  # start the pool
    print(f"pool of {args.workers} workers ready in {time.perf_counter() - started:.2f} s")
    for repeat in range(args.repeats):
        started = time.perf_counter()
        results = grade_math_batch(pairs, timeout_s=args.timeout, workers=args.workers)
        elapsed = time.perf_counter() - started
        correct = sum(r.reward for r in results)
        print(f"repeat {repeat + 1}: {len(pairs)} answers in {elapsed:.2f} s = {len(pairs) / elapsed:.0f} answers/s "
              f"({int(correct)} correct, {len(pairs) - int(correct)} wrong)")
    print("reasons:", dict(Counter(r.details["reason"] for r in results)))
    print(f"worker restarts (timeouts): {get_pool(args.workers).restarts}")


if __name__ == "__main__":
    main()
