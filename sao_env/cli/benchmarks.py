"""``sao-env eval`` and ``sao-env grade``: thin wrappers over sao_env.benchmarks.runner."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Literal, Optional

import typer

from sao_env.errors import UserError


Backend = Literal["transformers", "vllm", "openai"]
GraderKind = Literal["rule", "llm"]
Api = Literal["chat", "completions"]
Fallback = Literal["none", "answer-is", "last-number"]
FALLBACK_HELP = ("Where a math answer may come from besides the last \\boxed{}: none (the box only), answer-is, "
                 "last-number (default: the suite's answer_fallback, none for every shipped suite).")


MAX_NEW_TOKENS = 131072
"""The most tokens a response may be asked for (``--max-new-tokens``)."""
DEADLINE_HELP = ("Seconds one request to the server may take in all, connection, waiting and the whole reply "
                 "(a try past it is cut off, then retried like a timeout). Default 1800, or $SAO_ENV_HTTP_DEADLINE_S.")
GRADER_DEADLINE_HELP = ("Seconds one judge request may take in all, connection, waiting and the whole reply "
                        "(a try past it is cut off, then retried like a timeout). Default 180, or "
                        "$SAO_ENV_GRADER_DEADLINE_S.")
MAX_REPLY_HELP = ("Largest reply read from a server or judge, in bytes; a larger one is cut off there and its sample "
                  "fails, with one line saying so. Default 8388608 (8 MiB), or $SAO_ENV_HTTP_MAX_REPLY_BYTES.")


def _check_limits(http_retries, request_deadline=None, grader_deadline=None, max_reply_bytes=None) -> None:
    if http_retries is not None and http_retries < 0:
        raise UserError("--http-retries must be at least 0")
    for flag, value in (("--request-deadline", request_deadline), ("--grader-deadline", grader_deadline)):
        if value is not None and value <= 0:
            raise UserError(f"{flag} must be greater than 0")
    if max_reply_bytes is not None and max_reply_bytes < 1:
        raise UserError("--max-reply-bytes must be at least 1")


def _options(k, limit, max_new_tokens, temperature, top_p, seed, grader, grader_model, grader_base_url,
             grader_api_key, grading_timeout, leaderboard, progress, answer_fallback=None, http_retries=None,
             grader_deadline=None, max_reply_bytes=None, grader_serve=False, grader_max_tokens=None, servers=None):
    """The evaluation's options from the command's flags; a judge served here (``--grader-serve``) is appended to
    ``servers``, which the command stops when it ends."""
    from sao_env.benchmarks.evaluate import EvalOptions

    for flag, value in (("--k", k), ("--limit", limit), ("--max-new-tokens", max_new_tokens)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1")
    if max_new_tokens is not None and max_new_tokens > MAX_NEW_TOKENS:
        raise UserError(f"--max-new-tokens must be at most {MAX_NEW_TOKENS:,}")
    _check_limits(http_retries, None, grader_deadline, max_reply_bytes)
    if leaderboard is not None:
        from sao_env.leaderboard.benchmarks import check_folder

        check_folder(leaderboard)
    judge = None
    if grader_serve and grader != "llm":
        raise UserError("--grader-serve serves a judge model: it needs --grader llm")
    if grader == "llm" and grader_serve:
        grader_model, grader_base_url, server = _serve_judge(grader_model)
        servers.append(server)
    if grader == "llm":
        from sao_env.benchmarks.llm_grader import LLMJudge

        if grader_max_tokens is not None and grader_max_tokens < 1:
            raise UserError("--grader-max-tokens must be at least 1")
        judge = LLMJudge(grader_model, base_url=grader_base_url, api_key=grader_api_key, retries=http_retries,
                         deadline_s=grader_deadline, max_bytes=max_reply_bytes,
                         **({"max_tokens": grader_max_tokens} if grader_max_tokens else {}))
    return EvalOptions(k=k, limit=limit, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                       seed=seed, grader=grader, judge=judge, grading_timeout_s=grading_timeout,
                       leaderboard=leaderboard, show_progress=progress, answer_fallback=answer_fallback)


def _serve_judge(name: str | None):
    """Start vLLM's OpenAI-compatible server on the judge model (a model folder, a packaged model or a cached hub
    id) from the vLLM environment, on 127.0.0.1; the name and endpoint the judge uses, and the server."""
    import os

    from sao_env.benchmarks.runner import resolve_model
    from sao_env.engine import process

    name = name or os.environ.get("SAO_ENV_GRADER_MODEL")
    if not name:
        raise UserError("--grader-serve needs the judge model to serve: pass --grader-model NAME")
    ref = resolve_model(name)
    server = process.openai_server(ref.load, served_name=ref.name, threads=os.cpu_count() or 1)
    return ref.name, f"{server.url}/v1", server


@contextlib.contextmanager
def _served():
    """The servers a command starts for itself (a judge): stopped when the command ends, also when it fails, not
    only when the process exits (``main`` called from a notebook or a test)."""
    servers: list = []
    try:
        yield servers
    finally:
        for server in servers:
            server.close()


def _print_summaries(summaries: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summaries[0]['model']}" if summaries else None)
    for column in ("suite", "accuracy", "95% CI", "k", "problems", "grader", "answer from"):
        table.add_column(column, no_wrap=True)
    for s in summaries:
        acc = "n/a" if s["accuracy"] is None else f"{100 * s['accuracy']:.1f}%"
        ci = "n/a" if s["ci95_low"] is None else f"[{100 * s['ci95_low']:.1f}, {100 * s['ci95_high']:.1f}]"
        source = {None: "-", "none": "last box", "answer-is": "box, answer is", "last-number": "box, answer is, last number"}
        table.add_row(s["suite"], acc, ci, str(s["k"]), str(s["problems"]), s["grader"],
                      source.get(s.get("answer_fallback"), str(s.get("answer_fallback"))))
    console = Console()
    needed = max(console.measure(table, options=console.options.update_width(10_000)).maximum,
                 len(str(table.title or "")))
    if needed > console.width:  # a narrow terminal or a log file: widen rather than cut names
        console = Console(width=needed)
    console.print(table)
    for s in summaries:
        if s.get("_out"):
            console.print(f"{s['suite']}: {s['_out']}/summary.json", soft_wrap=True)
        if s.get("sanitized"):
            console.print(f"{s['suite']}: {s['sanitized']} response(s) held invalid Unicode or NUL bytes "
                          "(replaced by U+FFFD, then graded)", soft_wrap=True)
    boards = sorted({s["_leaderboard"] for s in summaries if s.get("_leaderboard")})
    if boards:
        console.print(f"leaderboard: {', '.join(boards)} (and index.html beside it)", soft_wrap=True)


def _exit_if_failed(summaries: list[dict]) -> None:
    """One line with the number of failed samples and exit code 1, when any failed."""
    failed = sum(s.get("failed") or 0 for s in summaries)
    if not failed:
        return
    total = sum((s.get("n") or 0) + (s.get("failed") or 0) for s in summaries)
    import sys

    print(f"sao-env: {failed:,} of {total:,} sample(s) failed (verdict 'failed', reason in samples.jsonl); "
          "the others are kept: run the same command again to retry the failed ones", file=sys.stderr, flush=True)
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_command(
        model: str = typer.Argument(..., help="Run directory (evaluates checkpoints/final), model folder, or Hugging Face id (served model name for --backend openai)."),
        suite: str = typer.Option(..., "--suite", "-s", help="Comma-separated suites (evals/*.yaml), e.g. beyond_aime,hmmt_feb_2025,imo_answerbench."),
        data: Optional[str] = typer.Option(None, "--data", help="Local data file or folder instead of the hub (a folder may hold several suites' data)."),
        checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="Checkpoint of a run directory (default: final)."),
        k: Optional[int] = typer.Option(None, "--k", help="Samples per problem (default: the suite's)."),
        limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate only the first N problems of each suite."),
        backend: Backend = typer.Option("transformers", "--backend", help="Generation backend."),
        max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Longest response (default: the suite's)."),
        temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature (default: the suite's)."),
        top_p: Optional[float] = typer.Option(None, "--top-p", help="Nucleus mass (default: the suite's)."),
        seed: int = typer.Option(0, "--seed", help="Sampling seed."),
        out: Optional[Path] = typer.Option(None, "--out", help="Output folder; each suite writes <out>/<suite>/ (default: RUN_DIR/benchmarks/<checkpoint> or results/benchmarks/<model>)."),
        grader: GraderKind = typer.Option("rule", "--grader", help="rule (math-verify) or llm (a judge model, for IMO-AnswerBench)."),
        answer_fallback: Optional[Fallback] = typer.Option(None, "--answer-fallback", help=FALLBACK_HELP),
        grader_model: Optional[str] = typer.Option(None, "--grader-model", help="Judge model for --grader llm (env SAO_ENV_GRADER_MODEL)."),
        grader_base_url: Optional[str] = typer.Option(None, "--grader-base-url", help="Judge endpoint, OpenAI-compatible (env OPENAI_BASE_URL)."),
        grader_api_key: Optional[str] = typer.Option(None, "--grader-api-key", help="Judge API key (env OPENAI_API_KEY)."),
        grader_max_tokens: Optional[int] = typer.Option(None, "--grader-max-tokens", help="--grader llm: the longest judge reply asked for (max_tokens; default 4096). A small local judge may never stop: 10 tokens/s on this CPU makes 4096 seven minutes a sample."),
        grader_serve: bool = typer.Option(False, "--grader-serve", help="--grader llm: serve --grader-model (a model folder or packaged model) with vLLM on 127.0.0.1 for this command (make install-vllm), instead of --grader-base-url."),
        base_url: Optional[str] = typer.Option(None, "--base-url", help="Server for --backend openai (env OPENAI_BASE_URL; default http://127.0.0.1:8000/v1)."),
        api_key: Optional[str] = typer.Option(None, "--api-key", help="Key for --backend openai (env OPENAI_API_KEY)."),
        api: Api = typer.Option("chat", "--api", help="--backend openai: chat (/v1/chat/completions) or completions (/v1/completions)."),
        prompt_template: str = typer.Option("auto", "--prompt-template", help="--api completions: whose chat template renders each prompt: auto (the model's own, found locally; refused where none is), a model folder, or none (raw prompts, for a base model)."),
        http_retries: Optional[int] = typer.Option(None, "--http-retries", help="Retries of a failed request to a server or judge (429, 5xx, connection errors; Retry-After honoured). Default 8, or $SAO_ENV_HTTP_RETRIES."),
        request_deadline: Optional[float] = typer.Option(None, "--request-deadline", help=DEADLINE_HELP),
        grader_deadline: Optional[float] = typer.Option(None, "--grader-deadline", help=GRADER_DEADLINE_HELP),
        max_reply_bytes: Optional[int] = typer.Option(None, "--max-reply-bytes", help=MAX_REPLY_HELP),
        batch_size: int = typer.Option(16, "--batch-size", help="--backend transformers: sequences sampled together."),
        concurrency: int = typer.Option(8, "--concurrency", help="--backend openai: requests in flight."),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", help="--backend vllm: GPUs per model."),
        grading_timeout: float = typer.Option(5.0, "--grading-timeout", help="Seconds one math comparison may take (then it grades 0)."),
        model_name: Optional[str] = typer.Option(None, "--model-name", help="Name in results and the leaderboard (default: derived from MODEL)."),
        leaderboard: Optional[Path] = typer.Option(None, "--leaderboard", help="Also record the results in this leaderboard folder (benchmarks.csv, one row per model, suite and k; benchmarks.md; index.html), e.g. leaderboards."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
    ) -> None:
        """Evaluate a checkpoint or model on benchmark suites (avg@k, pass@k, 95% CI).

        Each finished sample is kept as it finishes (responses.jsonl, samples.jsonl): a stopped or failed
        run is resumed by running the same command again. A sample whose request cannot succeed is recorded
        as failed with its reason; the command then says how many failed and exits with 1."""
        from sao_env.benchmarks.runner import run_eval
        from sao_env.benchmarks.suites import parse_suite_list

        _check_limits(http_retries, request_deadline, grader_deadline, max_reply_bytes)
        backend_options = {"batch_size": batch_size, "base_url": base_url, "api_key": api_key, "api": api,
                           "prompt_template": prompt_template,
                           "concurrency": concurrency, "tensor_parallel_size": tensor_parallel_size,
                           "retries": http_retries, "deadline_s": request_deadline, "max_bytes": max_reply_bytes}
        with _served() as servers:
            options = _options(k, limit, max_new_tokens, temperature, top_p, seed, grader, grader_model,
                               grader_base_url, grader_api_key, grading_timeout, leaderboard, progress,
                               answer_fallback, http_retries, grader_deadline, max_reply_bytes, grader_serve,
                               grader_max_tokens, servers)
            summaries = run_eval(model, parse_suite_list(suite), data=data, checkpoint=checkpoint, backend=backend,
                                 backend_options=backend_options, options=options, out=out, model_name=model_name)
        _print_summaries(summaries)
        _exit_if_failed(summaries)

    @app.command("grade")
    def grade_command(
        suite: str = typer.Option(..., "--suite", "-s", help="The suite the predictions answer (evals/*.yaml)."),
        predictions: Path = typer.Option(..., "--predictions", help="JSONL lines {'id', 'response'} (several per id = k samples), or swebench predictions ({'instance_id', 'model_name_or_path', 'model_patch'}, JSONL or a JSON list)."),
        out: Path = typer.Option(..., "--out", help="Output folder (samples.jsonl, summary.json)."),
        data: Optional[str] = typer.Option(None, "--data", help="Local data file or folder instead of the hub."),
        grader: GraderKind = typer.Option("rule", "--grader", help="rule (math-verify) or llm (a judge model)."),
        answer_fallback: Optional[Fallback] = typer.Option(None, "--answer-fallback", help=FALLBACK_HELP),
        grader_model: Optional[str] = typer.Option(None, "--grader-model", help="Judge model for --grader llm."),
        grader_base_url: Optional[str] = typer.Option(None, "--grader-base-url", help="Judge endpoint (env OPENAI_BASE_URL)."),
        grader_api_key: Optional[str] = typer.Option(None, "--grader-api-key", help="Judge API key (env OPENAI_API_KEY)."),
        grader_max_tokens: Optional[int] = typer.Option(None, "--grader-max-tokens", help="--grader llm: the longest judge reply asked for (max_tokens; default 4096). A small local judge may never stop: 10 tokens/s on this CPU makes 4096 seven minutes a sample."),
        grader_serve: bool = typer.Option(False, "--grader-serve", help="--grader llm: serve --grader-model (a model folder or packaged model) with vLLM on 127.0.0.1 for this command (make install-vllm), instead of --grader-base-url."),
        grading_timeout: float = typer.Option(5.0, "--grading-timeout", help="Seconds one math comparison may take."),
        model_name: Optional[str] = typer.Option(None, "--model-name", help="Name in the summary (default: swebench's model_name_or_path, else the predictions file name)."),
        leaderboard: Optional[Path] = typer.Option(None, "--leaderboard", help="Also record the result in this leaderboard folder (benchmarks.csv, benchmarks.md, index.html)."),
        http_retries: Optional[int] = typer.Option(None, "--http-retries", help="Retries of a failed judge request (default 8, or $SAO_ENV_HTTP_RETRIES)."),
        grader_deadline: Optional[float] = typer.Option(None, "--grader-deadline", help=GRADER_DEADLINE_HELP),
        max_reply_bytes: Optional[int] = typer.Option(None, "--max-reply-bytes", help=MAX_REPLY_HELP),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    ) -> None:
        """Grade saved responses for one suite and write samples.jsonl and summary.json.

        Each graded sample is appended to samples.jsonl as it is graded; a rerun reuses the judge's verdicts
        on the same responses. A sample the judge cannot grade (a request that cannot succeed, an invalid
        reply) is recorded as failed with its reason; the command then says how many failed and exits with 1."""
        from sao_env.benchmarks.runner import run_grade

        with _served() as servers:
            options = _options(None, None, None, None, None, 0, grader, grader_model, grader_base_url,
                               grader_api_key, grading_timeout, leaderboard, progress, answer_fallback, http_retries,
                               grader_deadline, max_reply_bytes, grader_serve, grader_max_tokens, servers)
            summary = run_grade(suite, predictions, out=out, data=data, model_name=model_name, options=options)
        summary["_out"] = str(out)
        _print_summaries([summary])
        _exit_if_failed([summary])
