"""Runs on a Ray cluster: every pending run of a grid, a sweep or a compare is one Ray task.

``run_many`` is ``sao_env.experiment.run_many`` with a cluster in place of the worker processes:

* The driver (the command's own process) joins the cluster (``ray.init(address=...)``: ``auto`` finds
  a cluster started on this machine or named by ``$RAY_ADDRESS``; ``HOST:PORT`` or ``ray://HOST:PORT``
  names one) and submits each run as a task reserving ``Cluster.resources`` (one CPU by default). It
  keeps the ledger and writes the tables; the nodes only run.
* A node writes the run directory at the driver's path (``--runs-dir`` is then a path every node
  shares) or, with ``node_runs_dir``, under that folder of its own disk. Either way the task sends
  back the summary and, for a grid, the run's per-seed row (read on the node, so the driver needs
  no file of it); with ``ship`` also the run folder itself (packed; its resume checkpoints left
  out), which the driver unpacks at its own path.
* A node lost mid-run (its raylet killed, the machine gone) loses only the runs in flight there:
  Ray runs them again elsewhere (up to ``retries`` times), resuming from their checkpoints where the
  run directory is shared. A run that raises (a configuration that cannot run, a node on other code)
  is not retried: it is reported once, with its line, the other runs go on, and ``ClusterFailed``
  names the failed runs at the end.
* A node must run the driver's code: before a run, the task compares its own code key
  (``provenance.code_key``) with the driver's and refuses to run on other code, which would record
  results under the driver's key.
* The nodes' runs print nothing the driver sees (their workers' output stays in the nodes' Ray logs), so
  the driver says every ``progress.RUN_AMONG_OTHERS_EVERY_S`` on stderr how many runs have finished and
  how many are on the cluster (stderr only: a grid's log keeps one line per run).
* A driver killed mid-grid takes its tasks with it (Ray ends a job's workers with its driver); run
  again, it reuses every run its ledger or the run directories list and submits the rest. A run a
  node finished whose row never reached the driver is found finished there and not made again.

What limits it (bench/bench_grid_scaling.py): the driver handles each finished run alone (the
callback, one ledger line with an fsync), a fixed cost per run; each task starts a worker process on
its node the first time (imports, and the warm start where the node's cache lacks it); shipped run
folders pass through the driver's network link.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import shutil
import signal
import socket
import tarfile
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from sao_env.errors import UserError, install_command

RESOURCE_NAMES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}
"""Resource names ``--run-resources`` takes beside custom ones, and the Ray task options they set."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where and how a command's runs go on a Ray cluster."""

    address: str
    """``auto`` (a cluster started on this machine, or ``$RAY_ADDRESS``), ``HOST:PORT`` or ``ray://HOST:PORT``."""
    resources: dict[str, float] = dataclasses.field(default_factory=lambda: {"CPU": 1.0})
    """What each run reserves: ``CPU``, ``GPU``, ``memory`` (bytes) and any custom resource of the nodes."""
    node_runs_dir: Path | None = None
    """Where a node writes run directories (``<env>/<label>/seed<N>`` under it, on its own disk); None:
    at the driver's own path, which every node must then share."""
    ship: bool = False
    """Send each finished run's folder back to the driver, unpacked at the driver's path."""
    retries: int = 3
    """Times Ray runs a task again after losing its worker or node (a run that raises is not retried)."""

    def task_options(self) -> dict[str, Any]:
        """The Ray task options of one run."""
        options: dict[str, Any] = {"max_retries": self.retries, "retry_exceptions": False}
        custom = {}
        for name, amount in self.resources.items():
            if name in RESOURCE_NAMES:
                options[RESOURCE_NAMES[name]] = int(amount) if name == "memory" else amount
            else:
                custom[name] = amount
        options.setdefault("num_cpus", 1.0)
        if custom:
            options["resources"] = custom
        return options

    def node_path(self, out: Path) -> Path:
        """Where a node writes the run directory the driver knows as ``out``."""
        out = Path(out)
        if self.node_runs_dir is None:
            return out if out.is_absolute() else Path.cwd() / out
        return Path(self.node_runs_dir) / Path(*out.parts[-3:])


class ClusterFailed(UserError):
    """Runs that raised on the cluster (each reported as it failed); the others finished and were recorded."""


class ClusterStopped(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped a command while its runs were on the cluster: ``(signal number, the
    unfinished runs described)``; their tasks are cancelled. A KeyboardInterrupt, so that a command that
    cleans up on Ctrl-C does the same here; with ``signal_name`` and ``exit_code``, as runs a local pool
    stopped at their checkpoints, so that a command prints its one line with the command that resumes."""

    @property
    def signum(self) -> int:
        return int(self.args[0])

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended."""
        return 128 + self.signum

    def __str__(self) -> str:
        runs = self.args[1]
        return (f"{self.signal_name}: {len(runs)} run{'s' if len(runs) != 1 else ''} stopped on the cluster unfinished "
                f"({'; '.join(runs)}); each resumes from its last checkpoint where its run directory is kept")


def parse_resources(text: str | None) -> dict[str, float]:
    """``CPU=2,GPU=1,memory=4e9,big_disk=1`` -> what each run reserves (CPU 1 unless given)."""
    resources = {"CPU": 1.0}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, amount = item.partition("=")
        name = name.strip()
        try:
            value = float(amount)
        except ValueError:
            value = -1.0
        if not name or value < 0 or value != value:
            raise UserError(f"--run-resources: {item.strip()!r} is not NAME=AMOUNT (a number >= 0), e.g. CPU=2,GPU=1")
        resources[name] = value
    return resources


def from_options(address: str | None, *, resources: str | None = None, node_runs_dir: Path | None = None,
                 ship: bool = False, jobs: int | None = None, needs_run_dirs: bool = False) -> Cluster | None:
    """The ``Cluster`` a command's options name, or None without ``--cluster``; the options that go
    only with it, or not with it, are one-line errors. ``needs_run_dirs``: the command reads its runs'
    directories (compare, sweep), so a node's own folder needs ``--ship-runs``."""
    if address is None:
        given = [name for name, value in (("--run-resources", resources), ("--node-runs-dir", node_runs_dir),
                                          ("--ship-runs", ship or None)) if value is not None]
        if given:
            raise UserError(f"{given[0]} goes with --cluster")
        return None
    if not address.strip():
        raise UserError("--cluster: give auto, HOST:PORT or ray://HOST:PORT")
    if jobs is not None:
        raise UserError("--jobs and --cluster do not go together: on a cluster each run is a task "
                        "(--run-resources says what each reserves)")
    if needs_run_dirs and node_runs_dir is not None and not ship:
        raise UserError("this command reads its runs' directories: with --node-runs-dir, add --ship-runs "
                        "(or write them on a path every node shares with --runs-dir)")
    return Cluster(address.strip(), parse_resources(resources), node_runs_dir, ship)


START_HINT = "start one with `ray start --head` (or name a running one: --cluster HOST:PORT)"
AUTH_HINT = ("set RAY_AUTH_MODE=token where this command runs (the token from ~/.ray/auth_token, $RAY_AUTH_TOKEN "
             "or $RAY_AUTH_TOKEN_PATH)")


@contextmanager
def _quiet_stderr() -> Iterator[Path]:
    """File descriptor 2 into a temporary file for the block: Ray's C++ core writes its retries there
    (``gcs_client.cc ... InvalidAuthToken``, one a second). Yields the file, read for a failure's line."""
    with tempfile.NamedTemporaryFile(prefix="sao-env-ray-", suffix=".log") as log:
        try:
            import sys

            sys.stderr.flush()
        except Exception:  # pragma: no cover - a closed stream
            pass
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            yield Path(log.name)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def probe(address: str) -> None:
    """Fail within seconds, in one line, where ``ray.init`` would retry for half a minute: no cluster at the
    address (``ray start --head``), or a cluster with token authentication while this process has none
    (``RAY_AUTH_MODE=token``). A ``ray://`` address (Ray Client) is left to ``ray.init``."""
    if address.startswith("ray://"):
        return
    from ray._private import services

    try:
        gcs = services.canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise UserError(f"--cluster {address}: no running Ray cluster found ({' '.join(str(err).split())[:200]}); "
                        f"{START_HINT}") from None
    if gcs is None:
        raise UserError(f"--cluster {address}: no running Ray cluster found on this machine and $RAY_ADDRESS is unset; "
                        f"{START_HINT}")
    host, _, port = gcs.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
    except (OSError, ValueError) as err:
        raise UserError(f"--cluster {address}: no Ray cluster answers at {gcs} ({err.strerror or err}); "
                        f"{START_HINT}") from None
    if address == "auto" and os.environ.get("RAY_AUTH_MODE") is None:
        # ray.init(address="auto") turns token authentication on where a token exists; so does the probe
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available

        quiet = logging.getLogger("ray._private.authentication.authentication_token_setup")
        level, quiet.level = quiet.level, logging.ERROR  # its warning that token authentication is on
        try:
            maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        finally:
            quiet.setLevel(level)
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    with _quiet_stderr():
        try:
            GcsClient(address=gcs, cluster_id=None)
        except AuthenticationError:
            raise UserError(f"--cluster {address}: the Ray cluster at {gcs} requires token authentication; "
                            f"{AUTH_HINT}") from None
        except Exception:  # anything else: ray.init says it
            return


@contextmanager
def connected(cluster: Cluster) -> Iterator[Any]:
    """Ray, joined to ``cluster`` for the block (left after it, unless this process had joined one before).
    No cluster at the address, or one that wants a token this process lacks, is a one-line error within
    seconds (``probe``); Ray's own log lines while joining are not shown."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--cluster needs Ray: {install_command('ray')}") from None
    joined = not ray.is_initialized()
    if joined:
        probe(cluster.address)
        main = threading.current_thread() is threading.main_thread()
        sigterm = signal.getsignal(signal.SIGTERM) if main else None
        try:
            with _quiet_stderr() as log:
                try:
                    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
                except (ConnectionError, RuntimeError, ValueError) as err:
                    auth = "InvalidAuthToken" in log.read_text(errors="replace") or "uthenticat" in str(err)
                    raise UserError(f"--cluster {cluster.address}: cannot join a Ray cluster there "
                                    f"({' '.join(str(err).split())[:300]}); "
                                    + (AUTH_HINT if auth else f"{START_HINT}; a cluster with token "
                                       "authentication also needs RAY_AUTH_MODE=token here")) from None
        finally:
            if main:
                signal.signal(signal.SIGTERM, sigterm)
    try:
        yield ray
    finally:
        if joined:
            ray.shutdown()


def _make(plan: Any, node_out: Path, code: dict, expect: str | None, options: dict, row: Callable | None,
          ship: bool) -> dict:
    """A task's body, on a node: make (or resume, or find finished) the run at ``node_out``; return its
    summary, seconds, node, per-seed row (``row(node_plan)``) and, with ``ship``, the packed folder."""
    from sao_env.experiment import MadeElsewhere, reuse_check, run_plan
    from sao_env.experiment.drivers import close_sandboxes
    from sao_env.provenance import code_key, code_version

    node = socket.gethostname()
    if expect is not None and code_key(code_version()) != expect:
        raise UserError(f"node {node} runs code {code_key(code_version())}, the driver {expect}: "
                        "every node needs the driver's checkout")
    mine = dataclasses.replace(plan, out=Path(node_out))
    finished, _ = reuse_check(mine, code)
    if finished:
        import json

        summary, seconds = MadeElsewhere(json.loads((mine.out / "summary.json").read_text())), 0.0
    else:
        try:
            summary, seconds = run_plan(mine, code=code, show_progress=False, **options)
        finally:
            close_sandboxes()
    return {"summary": summary, "seconds": seconds, "node": node, "row": row(mine) if row is not None else None,
            "folder": pack(mine.out) if ship else None}


def expected_code(code: dict) -> str | None:
    """The code key every node must run: the driver's (``code``'s)."""
    from sao_env.provenance import code_key

    return code_key(code)


def run_many(plans: list, *, cluster: Cluster, code: dict | None = None, loggers: tuple[str, ...] = (),
             on_done: Callable[..., None] | None = None, report: Callable[[str], None] = lambda line: None,
             describe: Callable[[Any], str] | None = None, rows: list[Callable] | None = None,
             **options: Any) -> None:
    """Make ``plans`` as tasks on ``cluster``; ``on_done(plan, summary, seconds)`` in this process as each
    finishes (``on_done(plan, summary, seconds, row)`` with ``rows``: per plan a picklable callable run on
    the node on the finished run, ``row(node_plan)``, whose value comes back). A run that raises is
    reported once (``report``, with ``describe(plan)``), the others go on, and ``ClusterFailed`` names
    them at the end; an exception in ``on_done`` cancels the runs in flight and is raised, and a signal
    (SIGINT, SIGTERM) cancels them too and raises ``ClusterStopped`` naming the unfinished runs.
    ``options`` go to ``run_plan`` (``checkpoint_every``)."""
    from sao_env import provenance

    if not plans:
        return
    code = code or provenance.code_version()
    describe = describe or (lambda plan: str(plan.out))
    if loggers:
        options["loggers"] = loggers
    with connected(cluster) as ray:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        report(f"{len(plans)} runs on the Ray cluster at {cluster.address}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}, "
               f"{ray.cluster_resources().get('CPU', 0):g} CPUs; each run reserves "
               + ", ".join(f"{k}={v:g}" for k, v in cluster.resources.items()))
        _check_fits(ray, nodes, cluster, report)
        task = ray.remote(_make).options(**cluster.task_options())
        expect = expected_code(code)
        pending = {task.remote(plan, cluster.node_path(plan.out), code, expect, options,
                               rows[i] if rows is not None else None, cluster.ship): plan
                   for i, plan in enumerate(plans)}
        failed: list[str] = []
        waiting = _Waiting(len(plans))
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=waiting.until_next_line())
                if not ready:
                    waiting.line(len(pending))
                    continue
                for ref in ready:
                    plan = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as err:
                        line = f"{describe(plan)}: {_error_line(err)}"
                        failed.append(line)
                        report(f"failed on the cluster, not retried: {line}")
                        continue
                    if result["folder"] is not None:
                        unpack(result["folder"], plan.out, report)
                    if on_done is not None:
                        args = (plan, result["summary"], result["seconds"])
                        on_done(*args, result["row"]) if rows is not None else on_done(*args)
        except KeyboardInterrupt as err:
            stopped = [f"{describe(plan)} {plan.out}" for plan in pending.values()]
            raise ClusterStopped(getattr(err, "signum", signal.SIGINT), stopped) from err
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
        if failed:
            raise ClusterFailed(f"{len(failed)} of {len(plans)} runs failed on the cluster (the lines above); "
                                "the others finished and are recorded. First: " + failed[0])


class _Waiting:
    """The driver's line while it waits on the cluster: runs finished and runs still there, every
    ``progress.RUN_AMONG_OTHERS_EVERY_S`` seconds of wall clock, on stderr."""

    def __init__(self, total: int):
        self.total, self.start = total, time.monotonic()
        self.last = self.start

    def until_next_line(self) -> float:
        from sao_env.experiment import progress

        return max(0.0, self.last + progress.RUN_AMONG_OTHERS_EVERY_S - time.monotonic())

    def line(self, pending: int) -> None:
        self.last = time.monotonic()
        print(f"sao-env: {self.total - pending} of {self.total} runs finished, {pending} on the cluster "
              f"({self.last - self.start:.0f} s)", file=sys.stderr, flush=True)


def _check_fits(ray: Any, nodes: list[dict], cluster: Cluster, report: Callable[[str], None]) -> None:
    """Say so when no live node offers what each run reserves (its tasks would wait for one)."""
    need = dict(cluster.resources)
    for node in nodes:
        offered = node.get("Resources", {})
        if all(offered.get(name, 0) >= amount for name, amount in need.items() if amount > 0):
            return
    report(f"no live node of the cluster offers {', '.join(f'{k}={v:g}' for k, v in need.items())}; "
           "the runs wait for one (an autoscaling cluster adds it)")


def _error_line(err: Exception) -> str:
    """A task's failure in one line: the run's own exception where Ray kept it."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        text = str(cause) if isinstance(cause, UserError) else f"{type(cause).__name__}: {cause}"
    else:
        text = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
    return " ".join(text.split())


SKIPPED = (".lock",)
"""Entries of a run folder not shipped: its lock; its resume checkpoints (``checkpoint.FOLDER``) go too."""


def pack(folder: Path) -> bytes:
    """A finished run's folder as a gzipped tar, without its lock and resume checkpoints."""
    from sao_env.runtime.checkpoint import FOLDER

    folder = Path(folder)
    skip = {folder / name for name in SKIPPED} | {folder / FOLDER}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path in skip or any(parent in skip for parent in path.parents) or not path.is_file():
                continue
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def unpack(data: bytes, out: Path, report: Callable[[str], None] = lambda line: None) -> bool:
    """Put a shipped run folder at ``out``, unless ``out`` already holds a finished run (it is the node's
    own folder, on a shared path, or the same run); an unfinished folder there is replaced. Returns
    whether it was written."""
    out = Path(out)
    if (out / "summary.json").is_file():
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.shipped-", dir=out.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        if out.exists():
            report(f"replacing the unfinished run at {out} with the one the cluster finished")
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return True


def grid_row(run: Any, node_plan: Any) -> tuple[dict, dict]:
    """On a node: a grid run's per-seed row (``grid.run_row``) read from the node's run folder, naming
    the driver's run directory as a run made there would."""
    from sao_env.grid import run_row

    row, numbers = run_row(dataclasses.replace(run, plan=node_plan))
    row["run_dir"] = str(run.plan.out)
    return row, numbers

