"""The typer application; each command group lives in its own module and registers itself here."""

from __future__ import annotations

import signal
import sys
import threading
import warnings

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



def _print_version(value: bool) -> None:
    if value:
        from sao_env import __version__
        from sao_env.provenance import code_key, code_version

        code = code_version()
        key = code_key(code)
        parts = []
        if code.get("git_commit"):
            parts.append(f"commit {code['git_commit'][:12]}" + (" with uncommitted changes" if code.get("dirty") else ""))
        if not key.startswith("sao-env=="):
            parts.append(f"code {key}")
        typer.echo(f"sao-env {__version__}" + (f" ({', '.join(parts)})" if parts else ""))
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version, the git commit of a checkout (and whether it has uncommitted changes) and the code key runs record, and exit."),
) -> None:
    """Drifting environments, asynchronous RL agents (SAO, GRPO, ...) and benchmark evaluation."""


from sao_env.cli import benchmarks, sweep, training  # noqa: E402  (each registers its commands on `app`)

training.register(app)
sweep.register(app)
from sao_env.cli import grid as _grid; _grid.register(app)  # noqa: E402,E702
benchmarks.register(app)
from sao_env.cli import images as _images; _images.register(app)  # noqa: E402,E702
from sao_env.cli import verdict as _verdict; _verdict.register(app)  # noqa: E402,E702
from sao_env.cli import models as _models; _models.register(app)  # noqa: E402,E702


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings meant for users (UserWarning) as ``sao-env: warning: ...``; others as Python formats them."""
    if issubclass(category, UserWarning):
        return f"sao-env: warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


_format_warning = warnings.formatwarning


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a command ran (raised in the main thread by ``main``'s handlers).

    A KeyboardInterrupt, so that code which cleans up on Ctrl-C does the same on SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_received: list[int] = []
"""The signals ``main``'s handlers received during the current command (the first decides the exit code)."""


def _stop(signum, frame) -> None:
    _received.append(signum)
    raise Stopped(signum)


def stopped_line(signum: int, what: str = "") -> str:
    """The one line a command stopped by a signal prints, e.g. ``sao-env: stopped by SIGINT (exit 130)``."""
    return f"sao-env: stopped by {signal.Signals(signum).name}{'; ' + what if what else ''} (exit {128 + signum})"


PIPED_HELP_WIDTH = 160
"""Columns of ``--help`` when stdout is not a terminal and neither $COLUMNS nor $TERMINAL_WIDTH says
otherwise (rich would take 80 and cut option names: ``--answer-fallba…``)."""


def _help_width() -> int | None:
    """The width typer's help is drawn at: PIPED_HELP_WIDTH for a pipe or a file, else typer's own choice."""
    import os

    from typer import rich_utils

    if rich_utils.MAX_WIDTH is None and not os.environ.get("COLUMNS") and not sys.stdout.isatty():
        return PIPED_HELP_WIDTH
    return rich_utils.MAX_WIDTH


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: user errors become one line on stderr and exit code 2,
    user warnings one line each. SIGINT and SIGTERM end any command with one line and 128 + the
    signal's number (130, 143), as a shell reports a process the signal ended; a command that
    handles the signal itself (a ``sim`` run writes a checkpoint) prints its own line instead."""
    from typer import rich_utils

    warnings.formatwarning = _one_line_warning
    _received.clear()
    width, rich_utils.MAX_WIDTH = rich_utils.MAX_WIDTH, _help_width()
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = app(args=argv, standalone_mode=False)  # typer returns the code of an Exit (KeyboardInterrupt: 130)
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
    except (typer.Abort, KeyboardInterrupt) as err:
        _received.append(getattr(err, "signum", signal.SIGINT))
        code = None
    finally:
        warnings.formatwarning = _format_warning
        rich_utils.MAX_WIDTH = width
        for s, handler in handlers.items():
            signal.signal(s, handler)
    if _received or code == 130:
        signum = _received[0] if _received else signal.SIGINT
        print(stopped_line(signum), file=sys.stderr)
        return 128 + signum
    return code if isinstance(code, int) else 0
