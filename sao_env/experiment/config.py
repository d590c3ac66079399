"""A run's configuration: scenario + agent recipe + seed, resolved from the spec folders, overridden
with ``key.sub=value`` items, validated, and expanded with every default written out (the form
that is hashed and recorded in a run's ``config.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sao_env.agents import ALGORITHMS, Agent
from sao_env.agents.configs import build_hparams
from sao_env.errors import UserError, did_you_mean
from sao_env.policy.model import ModelSpec
from sao_env.policy.warmstart import load_warm_started
from sao_env.runtime.sim import RuntimeSpec
from sao_env.scenario import Scenario, ScenarioSpec
from sao_env.specs import find_spec, load_yaml, path_safe_name
from sao_env.tasks import source_class


class AgentRecipe(BaseModel):
    """An agent recipe (agents/*.yaml): algorithm + hyper-parameters + model + runtime."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str
    """Label in leaderboards."""
    algorithm: str
    """Key of ``sao_env.agents.ALGORITHMS``."""
    description: str = ""
    tuning: str = ""
    """How the hyper-parameters were chosen (same effort and budget for every recipe)."""
    model: ModelSpec = ModelSpec()
    hparams: dict[str, Any] = {}
    """Validated by the algorithm's own config class (unknown keys are errors)."""
    runtime: RuntimeSpec = RuntimeSpec()


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: ScenarioSpec
    agent: AgentRecipe
    seed: int = Field(0, ge=0)
    threads: int = Field(1, ge=1)
    """CPU threads for torch; one is fastest for the tiny model and keeps results independent of the machine."""


def resolve_config(env: str, agent: str, seed: int = 0, overrides: list[str] | tuple[str, ...] = (), *,
                   build_sources: bool = True) -> RunConfig:
    """Load the env and agent specs by name or path, apply ``key.sub=value`` overrides, validate.

    ``build_sources=False`` (a dry run) leaves the task sources unbuilt: a benchmark stream's rows are
    not read, so nothing touches the disk's data or the network."""
    raw = {"env": load_yaml(find_spec("envs", env)), "agent": load_yaml(find_spec("agents", agent)), "seed": seed}
    for item in overrides:
        apply_override(raw, item)
    for part in ("env", "agent"):  # names become run directories and board files: one path component each
        if isinstance(raw[part], dict) and isinstance(raw[part].get("name"), str):
            raw[part]["name"] = path_safe_name(raw[part]["name"])
    try:
        config = RunConfig.model_validate(raw, context={"build_sources": build_sources})
        build_agent_config(config.agent)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        hint = ""
        if first["type"] == "extra_forbidden" and first["loc"]:
            hint = did_you_mean(first["loc"][-1], _fields_at(RunConfig, first["loc"][:-1]))
        raise UserError(f"invalid configuration at {where}: {first['msg']}{hint}") from None
    return config


def _fields_at(model: Any, loc: tuple) -> list[str]:
    """The field names of the pydantic model found at ``loc`` under ``model`` (list items skipped); none
    where the path leaves the models."""
    import typing

    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
        for _ in range(3):  # list[X], X | None
            if isinstance(model, type) and issubclass(model, BaseModel):
                break
            args = [a for a in typing.get_args(model) if a is not type(None)]
            model = args[0] if args else None
    return list(getattr(model, "model_fields", {}))


def apply_override(raw: dict, item: str) -> None:
    """``agent.hparams.lr=3e-4`` or ``env.phases.0.duration_h=0.1``; values are parsed as YAML."""
    if "=" not in item:
        raise UserError(f"override {item!r} is not of the form key.sub=value")
    key, value = item.split("=", 1)
    parts = key.split(".")
    node: Any = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise UserError(f"unknown override key {key!r}: no item {part} in {'.'.join(parts[:i]) or 'config'}")
            part = int(part)
        elif not isinstance(node, dict) or (part not in node and not _may_add(parts[:i], part)):
            known = [*(node if isinstance(node, dict) else ()), *_fields_at(RunConfig, tuple(
                int(p) if p.isdigit() else p for p in parts[:i]))]
            raise UserError(f"unknown override key {key!r}{did_you_mean(part, known)}")
        if last:
            node[part] = yaml.safe_load(value)
        else:
            if isinstance(node, dict) and part not in node:
                node[part] = {}
            node = node[part]


def _may_add(path: list[str], part: str) -> bool:
    """A key absent from the YAML may be set where a model defines it (validated afterwards)."""
    from sao_env.scenario import EvalSpec, LatencySpec, PhaseSpec, SourceSpec, WarmStartSpec

    shape = tuple("*" if p.isdigit() else p for p in path)
    if shape in (("agent", "hparams"), ("env", "phases", "*", "sources", "*", "params")):
        return True  # validated by the algorithm's / the source's own model
    models = {(): RunConfig, ("env",): ScenarioSpec, ("agent",): AgentRecipe, ("agent", "runtime"): RuntimeSpec,
              ("agent", "model"): ModelSpec, ("env", "latency"): LatencySpec, ("env", "eval"): EvalSpec,
              ("env", "warm_start"): WarmStartSpec, ("env", "phases", "*"): PhaseSpec,
              ("env", "phases", "*", "sources", "*"): SourceSpec}
    model = models.get(shape)
    return model is not None and part in model.model_fields


def build_agent_config(recipe: AgentRecipe):
    if recipe.algorithm not in ALGORITHMS:
        raise UserError(f"unknown algorithm {recipe.algorithm!r} in recipe {recipe.name!r}"
                        f"{did_you_mean(recipe.algorithm, ALGORITHMS)}; known: {', '.join(ALGORITHMS)}")
    return build_hparams(ALGORITHMS[recipe.algorithm].config_cls, recipe.hparams)


def build_agent(config: RunConfig, scenario: Scenario, *, show_progress: bool = True) -> Agent:
    torch.manual_seed(config.seed)
    policy, tokenizer, _ = load_warm_started(config.agent.model, scenario, show_progress=show_progress)
    algo = ALGORITHMS[config.agent.algorithm]
    agent = algo(policy, tokenizer, build_agent_config(config.agent), dis_band=scenario.spec.dis_band,
                 action_horizon=scenario.spec.max_new_tokens * scenario.spec.max_turns)
    if getattr(agent.config, "value_pretrain_episodes", 0):  # before t=0, not charged (agents/value_pretrain.py)
        from sao_env.agents.value_pretrain import pretrain_value
        pretrain_value(agent, scenario, episodes=agent.config.value_pretrain_episodes,
                       steps=agent.config.value_pretrain_steps, seed=config.seed)
    return agent


def expand_config(config: RunConfig) -> dict:
    """The configuration as plain data with every default written out: the recipe's hyper-parameters
    through the algorithm's config class and each source's parameters through its ``Params`` model."""
    data = config.model_dump(mode="json")
    data["agent"]["hparams"] = build_agent_config(config.agent).model_dump(mode="json")
    for phase in data["env"]["phases"]:
        for source in phase["sources"]:
            source["params"] = source_class(source["name"]).Params(**source["params"]).model_dump(mode="json")
    return data


def load_run_config(run_dir: Path) -> RunConfig:
    """The RunConfig a run directory's ``config.yaml`` records (its provenance block set aside)."""
    data = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    data.pop("provenance", None)
    return RunConfig(**data)
