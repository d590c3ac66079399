"""The ``images`` commands: the sandbox image built from Debian's packages, without a registry."""

from __future__ import annotations

import typer

images = typer.Typer(help="Container images of the Docker sandbox (built locally from Debian's packages).",
                     no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(images, name="images")


@images.command("build")
def build(force: bool = typer.Option(False, "--force", help="Build again even when the image is present.")) -> None:
    """Build the sandbox image the coding scenarios' ``sandbox: docker`` needs (mmdebstrap + docker import),
    tagged by the hash of its recipe; reuse it when present. Prints what it built or found."""
    from sao_env.sandbox.images import ensure_image

    ensure_image(force=force, report=typer.echo)


@images.command("status")
def status() -> None:
    """Say whether an engine answers, and the sandbox image's tag, recipe and presence."""
    from sao_env.sandbox.docker_exec import engine_problem
    from sao_env.sandbox.images import client, present, recipe

    spec = recipe()
    problem = engine_problem()
    if problem is not None:
        typer.echo(f"engine: none reachable ({problem})")
        typer.echo(f"{spec.tag}: unknown (no engine): {spec.describe()}")
        return
    typer.echo("engine: reachable")
    here = present(spec.tag, client())
    typer.echo(f"{spec.tag}: {'present' if here else 'missing (sao-env images build)'}: {spec.describe()}, "
               f"packages from {spec.mirror}")


@images.command("reap")
def reap() -> None:
    """Remove the sandbox's containers whose harness process is gone (a run killed mid-episode)."""
    from sao_env.sandbox.docker_exec import reap as reap_containers
    from sao_env.sandbox.images import client

    typer.echo(f"removed {reap_containers(client())} orphaned sandbox container(s)")
