"""The typer application; each command group lives in its own module and registers itself here."""

from __future__ import annotations

import sys

import typer

from sao_env.errors import UserError

try:  # recent typer vendors its own copy of click
    from typer._click.exceptions import ClickException as _ClickException
    from typer._click.exceptions import NoArgsIsHelpError as _NoArgsIsHelp
except ImportError:  # pragma: no cover - older typer uses click itself
    from click.exceptions import ClickException as _ClickException
    from click.exceptions import NoArgsIsHelpError as _NoArgsIsHelp

app = typer.Typer(
    name="sao-env",
    help="Drifting environments, asynchronous RL agents (SAO, GRPO, ...) and benchmark evaluation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

from sao_env.cli import benchmarks, training  # noqa: E402  (each registers its commands on `app`)

training.register(app)
benchmarks.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: user errors become one line on stderr and exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
    except UserError as err:
        print(f"sao-env: error: {err}", file=sys.stderr)
        return 2
    except (typer.Exit, SystemExit) as stop:
        return int(getattr(stop, "exit_code", getattr(stop, "code", 0)) or 0)
    except _NoArgsIsHelp as err:
        print(err.format_message())
        return 0
    except _ClickException as err:
        print(f"sao-env: error: {err.format_message()}", file=sys.stderr)
        return 2
    except (typer.Abort, KeyboardInterrupt):
        print("sao-env: aborted", file=sys.stderr)
        return 130
    return 0
