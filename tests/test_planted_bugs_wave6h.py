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
