"""Wave 6, the seventh by-hand round (bench/mutants.py --planted bench/planted/wave6-hand7.jsonl: 30 slips planted by a
helper who read only the package's diff): one test per survivor. Each names its change, fails with it and passes
without it, and asserts values worked out here."""

from __future__ import annotations

import pytest

from sao_env.errors import UserError


def _grid_file(tmp_path, rows: str, axes: str = "{}"):
    path = tmp_path / "grid.yaml"
    path.write_text(f"rows:\n{rows}scenarios: [style-drift]\nseeds: [0]\nbaseline: a\ncut: []\naxes: {axes}\n")
    return path


def test_a_rows_agent_overrides_are_checked_by_the_grids_early_check(tmp_path):
    """Changed: ``x.split("=", 1)[0]`` -> ``[-1]`` in ``cli.grid.precheck_cells``: the key, not the value, decides
    which overrides are the agent's, so a row's bad hyper-parameter is named by the early check (before torch,
    with the row) and not left to the run's full resolution."""
    from sao_env.cli.grid import precheck_cells
    from sao_env.grid import load_grid

    rows = ("  - {label: a, agent: sao}\n"
            "  - {label: b, agent: grpo, overrides: ['agent.hparams.lr=-1', 'env.eval.interval_h=0.01']}\n")
    with pytest.raises(UserError) as err:
        precheck_cells(load_grid(_grid_file(tmp_path, rows)))
    assert str(err.value) == ("scenario style-drift, row 'b': invalid configuration at agent.hparams.lr: "
                              "Input should be greater than 0")
    # an override whose value merely looks like an agent key is the environment's, and is not checked as the agent's
    fine = "  - {label: a, agent: sao}\n  - {label: b, agent: grpo, overrides: ['env.name=agent.hparams.lr']}\n"
    precheck_cells(load_grid(_grid_file(tmp_path, fine)))
    axis = "{agent.hparams.critic_lr: [1e-4, 0]}"
    with pytest.raises(UserError, match=r"^scenario style-drift, row 'a', agent.hparams.critic_lr=0: invalid "):
        precheck_cells(load_grid(_grid_file(tmp_path, "  - {label: a, agent: sao}\n", axis)))


def test_a_ctrl_c_without_a_signal_number_stops_the_cluster_run_as_sigint(monkeypatch, tmp_path):
    """Changed: ``signal.SIGINT`` -> ``signal.SIGTERM`` in ``cluster.run_many``: a bare KeyboardInterrupt (Ctrl-C
    in the driver, no ``signum``) is a SIGINT: exit code 130, its tasks cancelled, the unfinished runs named."""
    import contextlib
    import signal
    from types import SimpleNamespace

    import sao_env.cluster as cluster_module

    cancelled = []

    class FakeRay:
        def nodes(self):
            return [{"Alive": True}]

        def cluster_resources(self):
            return {"CPU": 2}

        def remote(self, fn):
            return SimpleNamespace(options=lambda **_: SimpleNamespace(remote=lambda plan, *rest: f"ref-{plan.out.name}"))

        def wait(self, refs, num_returns, timeout=None):
            raise KeyboardInterrupt

        def cancel(self, ref, force):
            cancelled.append(ref)

    monkeypatch.setattr(cluster_module, "connected", lambda cluster: contextlib.nullcontext(FakeRay()))
    monkeypatch.setattr(cluster_module, "_check_fits", lambda *args: None)
    fake_cluster = SimpleNamespace(address="127.0.0.1:6379", resources={"CPU": 1}, ship=False,
                                   task_options=lambda: {}, node_path=lambda out: out)
    plans = [SimpleNamespace(out=tmp_path / "a"), SimpleNamespace(out=tmp_path / "b")]
    with pytest.raises(cluster_module.ClusterStopped) as stopped:
        cluster_module.run_many(plans, cluster=fake_cluster, code={"source_sha256": "x"})
    assert stopped.value.signum == signal.SIGINT and stopped.value.exit_code == 130
    assert sorted(cancelled) == ["ref-a", "ref-b"]


def test_only_a_version_2_or_3_row_that_is_not_the_default_is_made_again_under_its_own():
    """Changed: ``in (2, 3) and version != EVAL_VERSION`` -> ``or`` in ``verify.remade_version``: a version-1 row
    (which no code can make again) or one at the default is re-made as it is, not with ``env.eval.version=1``
    (a configuration error) or a needless ``=3``."""
    from sao_env.experiment.verify import remade_version
    from sao_env.scenario import EVAL_VERSION

    assert EVAL_VERSION == 3
    assert remade_version({"eval_version": "2"}) == 2 and remade_version({"eval_version": 2.0}) == 2
    assert remade_version({"eval_version": "1"}) is None and remade_version({"eval_version": "3"}) is None
    assert remade_version({"eval_version": ""}) is None and remade_version({}) is None
    assert remade_version({"eval_version": "x"}) is None and remade_version({"eval_version": "4"}) is None
