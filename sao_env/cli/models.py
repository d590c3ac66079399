"""``sao-env models``: the model names a recipe can give as ``agent.model.name`` without a path or hub id."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    app.command("models")(models)


def models(
    materialize: bool = typer.Option(False, "--materialize", help="Convert every installed packaged model into the cache now (otherwise the first run that names it does)."),
) -> None:
    """List the tiny models built from a config and the pretrained models that ship in a package, with where
    each stands here (a packaged model is converted once into the cache, then loaded like a local folder)."""
    from sao_env.hub import TINY_NAMES
    from sao_env.policy import packaged

    for name in TINY_NAMES:
        typer.echo(f"{name:24s} tiny model built from a config (character tokenizer); warm-started per scenario")
    for name, model in packaged.PACKAGED.items():
        if materialize and not packaged.status(name).startswith("not installed"):
            packaged.materialize(name)
        typer.echo(f"{name:24s} {model.description}; from {model.distribution} ({model.hub_id}, {model.license}): "
                   f"{packaged.status(name)}")
