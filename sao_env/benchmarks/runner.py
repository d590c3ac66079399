"""What ``sao-env eval`` and ``sao-env grade`` do, without the command-line parsing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sao_env.benchmarks.evaluate import EvalOptions, evaluate_suite, grade_predictions, prepare_suite, slug
from sao_env.benchmarks.suites import load_suite
from sao_env.errors import UserError


@dataclass(frozen=True)
class ModelRef:
    """What to evaluate: ``load`` goes to the backend, ``name`` into results and the leaderboard."""

    load: str
    name: str
    run_dir: Path | None = None
    checkpoint: str | None = None


def looks_local(argument: str) -> bool:
    """Whether ``argument`` can only mean a path on this machine, not a Hugging Face id (``NAME`` or
    ``ORG/NAME``): it starts with ``/``, ``./``, ``../`` or ``~``, has more than one separator, or its
    first part is a folder here (``runs/does-not-exist`` beside a ``runs/`` folder)."""
    import os

    text = argument.replace(os.sep, "/")
    parts = text.split("/")
    return (text.startswith(("/", "./", "../", "~")) or text in (".", "..") or len(parts) > 2
            or (len(parts) == 2 and Path(parts[0]).is_dir()))


def resolve_model(argument: str, checkpoint: str | None = None, *, local: bool = True) -> ModelRef:
    """A run directory (``config.yaml`` + ``checkpoints/``) means its ``checkpoints/final`` (or
    ``checkpoint``); any other folder is a model folder; a packaged model's name (``sao-env models``) its
    materialized folder; anything else a hub id / served name.
    With ``local`` (backends that load the weights here), an argument that ``looks_local`` but does not
    exist is an error at once, before any suite or hub is read."""
    path = Path(argument)
    if local and not path.exists() and (path.is_symlink() or looks_local(argument)):
        what = "a broken link" if path.is_symlink() else "no such run directory or model folder"
        raise UserError(f"{argument}: {what} (a Hugging Face id is NAME or ORG/NAME)")
    if path.is_dir() and (path / "checkpoints").is_dir() and (path / "config.yaml").is_file():
        name = checkpoint or "final"
        folder = path / "checkpoints" / name
        if not folder.is_dir():
            available = sorted(p.name for p in (path / "checkpoints").iterdir() if p.is_dir())
            raise UserError(f"{path} has no checkpoint {name!r}; available: {', '.join(available) or 'none'}")
        return ModelRef(str(folder), f"{path.resolve().name}/{name}", path, name)
    if checkpoint is not None:
        raise UserError(f"--checkpoint needs a run directory (config.yaml + checkpoints/); {argument} is not one")
    if path.is_dir():
        if local and not (path / "config.json").is_file():
            what = ("a run's config.yaml but no checkpoints/ (an unfinished run?)" if (path / "config.yaml").is_file()
                    else "no checkpoints/final (it is not a run directory)")
            raise UserError(f"{argument}: the folder holds {what} and no model (no config.json): pass a run "
                            "directory, a model folder or a Hugging Face id")
        return ModelRef(str(path), path.resolve().name)
    if path.exists():
        raise UserError(f"{argument} is a file; pass a run directory, a model folder or a Hugging Face id")
    from sao_env.policy import packaged

    if local and packaged.is_packaged(argument):  # converted from its package once, then a local folder
        return ModelRef(str(packaged.materialize(argument)), argument)
    return ModelRef(argument, argument)


def default_out_dir(ref: ModelRef) -> Path:
    if ref.run_dir is not None:
        return ref.run_dir / "benchmarks" / (ref.checkpoint or "final")
    return Path("results") / "benchmarks" / slug(ref.name)


def run_eval(
    model: str,
    suites: list[str],
    *,
    data: str | None = None,
    checkpoint: str | None = None,
    backend: str = "transformers",
    backend_options: dict[str, Any] | None = None,
    options: EvalOptions | None = None,
    out: Path | None = None,
    model_name: str | None = None,
) -> list[dict[str, Any]]:
    """Evaluate ``model`` on each suite; writes ``<out>/<suite>/`` and returns the summaries.

    Everything that can fail cheaply (suite files, data, Docker for SWE-bench, the judge) is checked
    before the model is loaded.
    """
    from sao_env.benchmarks.backends import make_backend

    options = options or EvalOptions()
    ref = resolve_model(model, checkpoint, local=backend != "openai")
    specs = [load_suite(name) for name in suites]
    runs = [prepare_suite(spec, data, options.limit) for spec in specs]
    if any(spec.grader == "swebench" for spec in specs):
        from sao_env.benchmarks.swebench import instance_row, require_docker, require_full_rows

        require_docker()
        for run in runs:
            if run.spec.grader == "swebench":
                require_full_rows([instance_row(t) for t in run.tasks], source=run.source)
    if options.grader == "llm" and options.judge is None:
        raise UserError("--grader llm needs a judge model (--grader-model)")
    backend_options = dict(backend_options or {})
    if backend == "openai" and backend_options.get("api") == "completions":
        from sao_env.benchmarks.backends import completions_template

        backend_options["prompt_template"] = completions_template(ref.load, backend_options.get("prompt_template") or "auto")
    else:
        backend_options.pop("prompt_template", None)
    engine = make_backend(backend, ref.load, **{"seed": options.seed, **backend_options})
    out_root = out or default_out_dir(ref)
    name = model_name or ref.name
    summaries = []
    try:
        for run in runs:
            folder = out_root / run.spec.name
            summary = evaluate_suite(run, engine, model_name=name, out_dir=folder, options=options)
            summaries.append({**summary, "_out": str(folder)})
    finally:
        getattr(engine, "close", lambda: None)()  # a server started for this evaluation
    return summaries


def run_grade(
    suite: str,
    predictions: Path,
    *,
    out: Path,
    data: str | None = None,
    model_name: str | None = None,
    options: EvalOptions | None = None,
) -> dict[str, Any]:
    """Grade a predictions file (JSONL with ``id`` and ``response``) for one suite into ``out``."""
    spec = load_suite(suite)
    run = prepare_suite(spec, data)
    return grade_predictions(run, predictions, out_dir=out, model_name=model_name,
                             options=options or EvalOptions(leaderboard=None))
