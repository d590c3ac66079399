"""A typo or a bad value in ``agent.hparams.*`` is one line before torch is imported (issue #54 section 3): the
algorithms' config classes live in ``sao_env.agents.configs``, which needs no torch, and ``run``, ``compare``
and ``grid`` check a recipe's hyper-parameters with them first; the line is the one the full resolution gives.
The classes dump as they did beside their agents (configuration hashes stay)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _cli(args: list[str], cwd: Path) -> tuple[int, str, bool]:
    """``python -m sao_env.cli ARGS``, in process of a fresh interpreter: (exit code, stderr, torch imported)."""
    snippet = ("import sys\nfrom sao_env.cli import main\ncode = main(sys.argv[1:])\n"
               "print('torch' in sys.modules)\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", snippet, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stderr, done.stdout.strip().endswith("True")


@pytest.mark.parametrize(("override", "line"), [
    ("agent.hparams.lr=abc",
     "invalid configuration at agent.hparams.lr: Input should be a valid number, unable to parse string as a number"),
    ("agent.hparams.lrr=1e-4", "invalid configuration at agent.hparams.lrr: Extra inputs are not permitted; "
     "did you mean 'lr'?"),
    ("agent.hparams.critic_updates=0",
     "invalid configuration at agent.hparams.critic_updates: Input should be greater than or equal to 1"),
    ("agent.hparams.loss=dis_seq", "invalid configuration at agent.hparams.loss: Value error, unknown loss 'dis_seq'; "
     "known: dis, ppo_clip, pg, tis, mis_token, mis_seq, gspo, dis_sequence, dis_step"),
])
def test_run_names_a_bad_hyperparameter_before_torch_loads(tmp_path, override, line):
    code, err, torch_loaded = _cli(["run", "--agent", "sao", override, "--out", str(tmp_path / "run")], tmp_path)
    assert (code, err, torch_loaded) == (2, f"sao-env: error: {line}\n", False)
    assert not (tmp_path / "run").exists()


def test_each_algorithm_is_checked_by_its_own_class(tmp_path):
    code, err, torch_loaded = _cli(["run", "--agent", "grpo", "agent.hparams.loss=dis_step", "--dry-run"], tmp_path)
    assert (code, torch_loaded) == (2, False)
    assert err == ("sao-env: error: invalid configuration at agent.hparams.loss: Value error, unknown policy loss "
                   "'dis_step'; known: dis, ppo_clip, pg, tis, mis_token, mis_seq, gspo\n")
    code, err, torch_loaded = _cli(["compare", "--agents", "running_mean,reinforce", "agent.hparams.window=2",
                                    "--dry-run"], tmp_path)
    assert (code, torch_loaded) == (2, False)
    assert err.startswith("sao-env: error: invalid configuration at agent.hparams.window: Extra inputs are not "
                          "permitted") and err.count("\n") == 1


def _grid(tmp_path: Path, *, rows: str, cut: str = "[]", axes: str = "{}") -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(f"rows:\n{rows}scenarios: [style-drift, tool-drift]\nseeds: [0]\nbaseline: a\ncut: {cut}\n"
                    f"axes: {axes}\n")
    return path


@pytest.mark.parametrize(("rows", "cut", "axes", "line"), [
    ("  - {label: a, agent: sao}\n  - {label: b, agent: grpo, overrides: ['agent.hparams.lrr=1e-4']}\n", "[]", "{}",
     "scenario style-drift, row 'b': invalid configuration at agent.hparams.lrr: Extra inputs are not permitted; "
     "did you mean 'lr'?"),
    ("  - {label: a, agent: sao}\n  - {label: b, agent: running_mean}\n", "['agent.hparams.lr=abc']", "{}",
     "scenario style-drift, row 'a': invalid configuration at agent.hparams.lr: Input should be a valid number, "
     "unable to parse string as a number"),
    ("  - {label: a, agent: sao}\n  - {label: b, agent: vapo}\n", "[]",
     "{agent.hparams.critic_lr: [1e-4, -1]}",
     "scenario style-drift, row 'a', agent.hparams.critic_lr=-1: invalid configuration at agent.hparams.critic_lr: "
     "Input should be greater than 0"),
    ("  - {label: a, agent: sao}\n  - {label: b, agent: sao_typo}\n", "[]", "{}",
     "scenario style-drift, row 'b': unknown agent 'sao_typo'"),
])
def test_grid_names_a_bad_hyperparameter_before_torch_loads(tmp_path, rows, cut, axes, line):
    grid = _grid(tmp_path, rows=rows, cut=cut, axes=axes)
    code, err, torch_loaded = _cli(["grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run"], tmp_path)
    assert (code, torch_loaded) == (2, False), err
    assert err.startswith(f"sao-env: error: {line}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_the_early_line_is_the_full_resolutions(tmp_path):
    """Where the early check is passed by (an algorithm it does not know), the run's resolution gives the line."""
    from sao_env.agents.configs import check_hparams
    from sao_env.errors import UserError
    from sao_env.experiment.config import resolve_config

    check_hparams({"algorithm": "not_one", "hparams": {"lrr": 1}})  # left to the full resolution
    check_hparams({"algorithm": "sao", "hparams": {1: 2}})
    with pytest.raises(UserError) as early:
        check_hparams({"algorithm": "sao", "hparams": {"critic_lrr": 1e-4}})
    with pytest.raises(UserError) as late:
        resolve_config("style-drift", "sao", overrides=["agent.hparams.critic_lrr=1e-4"], build_sources=False)
    assert str(early.value) == str(late.value) == ("invalid configuration at agent.hparams.critic_lrr: Extra inputs "
                                                   "are not permitted; did you mean 'critic_lr'?")


def test_the_config_classes_load_no_torch_and_agree_with_the_agents():
    code = ("import sys\nimport sao_env.agents\nfrom sao_env.agents.configs import CONFIGS\n"
            "from sao_env.agents import AgentConfig\nprint('torch' in sys.modules, len(CONFIGS))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["False", "7"], done.stderr

    from sao_env.agents import ALGORITHMS, AgentConfig, base, grpo, sao, vapo
    from sao_env.agents.configs import CONFIGS, POLICY_LOSS_NAMES, SEGMENT_LOSS_NAMES
    from sao_env.agents.segment_dis import SEGMENT_LOSSES
    from sao_env.algos import POLICY_LOSSES

    assert {name: algo.config_cls for name, algo in ALGORITHMS.items()} == CONFIGS
    assert list(ALGORITHMS) == list(CONFIGS)
    assert tuple(POLICY_LOSSES) == POLICY_LOSS_NAMES and tuple(SEGMENT_LOSSES) == SEGMENT_LOSS_NAMES
    assert base.AgentConfig is AgentConfig and sao.SAOConfig is CONFIGS["sao"] and grpo.GRPOConfig is CONFIGS["grpo"]
    assert vapo.VAPOConfig is CONFIGS["vapo"]


# sha256 of each algorithm's default hyper-parameters as dumped (json, sorted keys), the first 16 hex digits,
# as the classes dumped before they moved to configs.py: a run's configuration hash is made of this dump.
DEFAULT_DUMPS = {"sao": "a238465e2b9e4c80", "grpo": "15575ed4db5f52be", "vapo": "086647cb5a5019f7",
                 "running_mean": "c9d13cfc4d6443fe", "reinforce": "24661dae9a605c2a",
                 "per_prompt": "bf483d6d691778d6", "oracle_class": "bf483d6d691778d6"}


def test_the_defaults_dump_as_before():
    from sao_env.agents.configs import CONFIGS

    found = {name: hashlib.sha256(json.dumps(cls().model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]
             for name, cls in CONFIGS.items()}
    assert found == DEFAULT_DUMPS
