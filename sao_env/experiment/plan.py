"""Planning: where a run goes and whether a finished one can be reused.

Where runs go: ``runs/<env>/<label>/seed<N>``. The label is the recipe's name when the resolved
configuration (seed apart) is the recipe's own, and ``<name>+<8 hex digits>`` (a hash of the
resolved configuration without its seed) when overrides change it, so runs of different
configurations never share a directory while every seed of one configuration shares a folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sao_env.experiment.config import RunConfig, expand_config, resolve_config
from sao_env import provenance
from sao_env.provenance import code_key, config_hash, short
from sao_env.runtime import checkpoint as ckpt


@dataclass(frozen=True)
class RunPlan:
    """One run to make or reuse: its configuration, where it goes and what identifies it."""

    config: RunConfig
    label: str
    """Directory name and leaderboard label: the recipe's name, ``+<hash>`` when overrides change it."""
    overrides: tuple[str, ...]
    """The ``key.sub=value`` overrides as given (recorded; the hash, not this text, decides reuse)."""
    config_hash: str
    """sha256 of the expanded configuration (``expand_config``)."""
    out: Path


def plan_run(env: str, agent: str, seed: int = 0, overrides: list[str] | tuple[str, ...] = (), *,
             runs_dir: Path = Path("runs"), out: Path | None = None, build_sources: bool = True) -> RunPlan:
    """Resolve a run and its directory ``runs_dir/<env>/<label>/seed<N>`` (``out`` when given);
    ``build_sources=False`` for a dry run (``resolve_config``)."""
    config = resolve_config(env, agent, seed, overrides, build_sources=build_sources)
    expanded = expand_config(config)
    label = config.agent.name
    if overrides:
        unseeded = config_hash({k: v for k, v in expanded.items() if k != "seed"})
        base = expand_config(resolve_config(env, agent, config.seed, build_sources=build_sources))
        if unseeded != config_hash({k: v for k, v in base.items() if k != "seed"}):
            label = f"{config.agent.name}+{unseeded[:8]}"
    out = out if out is not None else Path(runs_dir) / config.env.name / label / f"seed{config.seed}"
    return RunPlan(config, label, tuple(overrides), config_hash(expanded), Path(out))


def reuse_check(plan: RunPlan, code: dict | None = None) -> tuple[bool, str]:
    """``(reuse, why)``: a run is reused only when it finished (``summary.json``) with the same
    configuration hash and the same code (``provenance.code_key``)."""
    code = code or provenance.code_version()
    path = plan.out / "summary.json"
    if not plan.out.exists():
        return False, "new"
    if not path.is_file():
        resumable = resume_point(plan, code)
        if resumable is not None:
            return False, f"unfinished; resumes from its checkpoint at simulated {resumable / 3600:.3f} h"
        return False, "unfinished (no summary.json)"
    try:
        recorded = json.loads(path.read_text()).get("provenance") or {}
    except (OSError, ValueError):
        return False, "summary.json unreadable"
    if not recorded.get("config_hash"):
        return False, "no configuration hash recorded (an older run)"
    if recorded["config_hash"] != plan.config_hash:
        return False, f"configuration changed ({short(recorded['config_hash'])} -> {short(plan.config_hash)})"
    if code_key(recorded.get("code")) != code_key(code):
        return False, f"code changed ({code_key(recorded.get('code'))} -> {code_key(code)})"
    return True, f"finished with the same configuration ({short(plan.config_hash)}) and code ({code_key(code)})"


def resume_point(plan: RunPlan, code: dict) -> float | None:
    """Simulated seconds of the checkpoint a run of ``plan`` would resume from, or None."""
    for _, state, _ in ckpt.newest_good(plan.out / ckpt.FOLDER):
        if state is not None:
            same = state["config_hash"] == plan.config_hash and state["code_key"] == code_key(code)
            return state["sim_time_s"] if same else None
    return None
