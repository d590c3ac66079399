"""Experiment trackers that mirror a run's ``metrics.jsonl``: TensorBoard and Weights & Biases.

Every record of ``metrics.jsonl`` (learner updates and evaluations) is sent with the same metric
names; the x-axis is simulated time. TensorBoard's step is an integer: the simulated second
(``round(sim_time_s)``). Weights & Biases logs ``sim_time_s`` itself as the step metric of every
other metric. Non-numeric fields (``kind``, ``phase``) are not sent.

``--logger tensorboard`` writes event files to ``<run>/tensorboard/`` (``pip install
'sao-env[tensorboard]'``). ``--logger wandb`` writes to ``<run>/wandb/``, offline unless
``$WANDB_MODE`` says otherwise (``wandb sync`` uploads later); the project is ``$WANDB_PROJECT``,
else ``sao-env`` (``pip install 'sao-env[wandb]'``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from sao_env.errors import UserError, install_command

LOGGERS = ("tensorboard", "wandb")
"""Names accepted by ``--logger``."""


class Tracker(Protocol):
    def log(self, record: dict[str, Any]) -> None:
        """Send one ``metrics.jsonl`` record."""

    def close(self) -> None: ...


def parse_loggers(names: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``["tensorboard,wandb"]`` or ``["tensorboard", "wandb"]`` -> ``("tensorboard", "wandb")``; checked."""
    out: list[str] = []
    for item in names or ():
        for name in item.split(","):
            name = name.strip().lower()
            if not name or name == "none":
                continue
            if name not in LOGGERS:
                raise UserError(f"unknown logger {name!r}; known: {', '.join(LOGGERS)}")
            if name not in out:
                out.append(name)
    return tuple(out)


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's numeric fields (booleans and ``sim_time_s`` excluded), as floats."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "sim_time_s"}


class TensorBoardTracker:
    """Scalars in ``<run>/tensorboard/``; step = simulated second."""

    def __init__(self, out: Path):
        require(("tensorboard",))
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out / "tensorboard"))

    def log(self, record: dict[str, Any]) -> None:
        step = int(round(record.get("sim_time_s", 0.0)))
        for name, value in scalars(record).items():
            self.writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A Weights & Biases run in ``<run>/wandb/`` (offline by default); step metric ``sim_time_s``."""

    def __init__(self, out: Path, *, name: str, config: dict[str, Any]):
        require(("wandb",))
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "sao-env"), name=name, dir=str(out),
                              mode=os.environ.get("WANDB_MODE", "offline"), config=config,
                              settings=wandb.Settings(silent=True, console="off"))
        self.run.define_metric("sim_time_s")
        self.run.define_metric("*", step_metric="sim_time_s")

    def log(self, record: dict[str, Any]) -> None:
        self.run.log({"sim_time_s": float(record.get("sim_time_s", 0.0)), **scalars(record)})

    def close(self) -> None:
        self.run.finish()


def require(names: tuple[str, ...]) -> None:
    """Fail now, before any run starts, when a tracker's package is missing."""
    for logger in names:
        module = "torch.utils.tensorboard" if logger == "tensorboard" else "wandb"
        try:
            __import__(module)
        except ImportError:
            raise UserError(f"--logger {logger} needs the {logger} package: {install_command(logger)}") from None


def open_trackers(names: tuple[str, ...], out: Path, *, name: str, config: dict[str, Any]) -> list[Tracker]:
    """The trackers ``names`` asks for, opened on run directory ``out``; a missing package is a UserError."""
    trackers: list[Tracker] = []
    try:
        for logger in names:
            trackers.append(TensorBoardTracker(out) if logger == "tensorboard"
                            else WandbTracker(out, name=name, config=config))
    except BaseException:
        for tracker in trackers:
            tracker.close()
        raise
    return trackers
