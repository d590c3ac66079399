"""Every algorithm's hyper-parameters (``agent.hparams``), in a module that imports pydantic and no torch.

The command line validates a recipe's hyper-parameters with these models before torch is imported, so a typo
or a bad value in ``agent.hparams.*`` (an override, a grid's row or cut) is one line in about a second; the
agents (``sao.py``, ``grpo.py``, ...) take their config classes from here, and the old names stay importable
there. ``CONFIGS`` maps each algorithm name of ``sao_env.agents.ALGORITHMS`` to its config class (the two
agree, ``tests/test_hparams_before_torch.py``). A model here dumps as it did beside its agent: run
configurations keep their hashes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, ConfigDict, Field, ValidationError, field_validator, model_validator

from sao_env.config_dump import OmitDefaults
from sao_env.errors import UserError, did_you_mean

MAX_LR = 1e6
"""The largest learning rate a recipe may set: Adam moves each weight by about lr per step, so a larger one
diverges at its first step, and past float32's range (3.4e38) the optimizer cannot take the step at all."""

POLICY_LOSS_NAMES: tuple[str, ...] = ("dis", "ppo_clip", "pg", "tis", "mis_token", "mis_seq", "gspo")
"""The names of ``sao_env.algos.POLICY_LOSSES``, in its order (the registry's functions need torch)."""
SEGMENT_LOSS_NAMES: tuple[str, ...] = ("dis_sequence", "dis_step")
"""The names of ``sao_env.agents.segment_dis.SEGMENT_LOSSES``, in its order."""


class AgentConfig(OmitDefaults):
    """Hyper-parameters common to every agent (each algorithm adds its own); unknown keys, infinite
    and NaN numbers are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    lr: float = Field(1e-4, gt=0, le=MAX_LR)
    """Actor learning rate (Adam)."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's betas for every optimizer of the agent."""
    adam_eps: float = Field(1e-5, gt=0)
    """Adam's epsilon (1e-5 as in CleanRL's PPO: a saturated softmax's tiny gradients are not
    rescaled into full-size steps, which otherwise erodes tokens the policy is already sure of)."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this (None: no clipping); the unclipped norm is logged."""
    agg: str = "token_mean"
    """Loss aggregation, see ``sao_env.algos.agg_loss``."""
    reward_norm: bool = False
    """Normalise rewards by a running mean/std before computing advantages (long, noisy episodes)."""
    micro_batch_tokens: int | None = Field(None, ge=1)
    """Token budget of one learner micro-batch (rows x padded width): a batch larger than this is packed into
    micro-batches by length and its gradient accumulated (``plan_micro_batches``); the loss keeps the recipe's
    aggregation over the whole batch. None: the batch in one piece."""
    gradient_checkpointing: bool = False
    """Recompute each transformer block's activations in the backward pass instead of keeping them (large
    models: memory for about one more forward pass)."""

    fused_adam: bool = False
    """Every optimizer of the agent with torch's fused Adam kernel: on a 135M-parameter model a step takes 0.45 s
    where the default (single-tensor) kernel takes 1.62 s (docs/performance.md), with other float bits, so the
    tiny models' recipes (and their pinned bytes and boards) keep the default."""

    omit_at_default: ClassVar[tuple[str, ...]] = ("micro_batch_tokens", "gradient_checkpointing", "fused_adam")
    """Keys left out of the dump while they hold their defaults: configurations written before they existed
    keep their hashes."""


    @field_validator("adam_betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Adam's betas must lie in [0, 1), got {list(betas)}")
        return betas


class SAOConfig(AgentConfig):
    """SAO's hyper-parameters (``sao_env.agents.sao``)."""

    critic_lr: float = Field(1e-4, gt=0, le=MAX_LR)
    """Critic learning rate (Adam), its own setting (the paper: 5x the actor's, 5e-6 against 1e-6)."""
    critic_updates: int = Field(2, ge=1)
    """K: critic steps per policy update (1: a critic no faster than the actor)."""
    critic_warmup_updates: int = Field(8, ge=0)
    """Learner updates during which only the critic trains (its cold start)."""
    critic_freeze_attention: bool = True
    """Freeze the critic's attention modules, as the paper does (False: every critic weight trains)."""
    critic_frozen_pattern: str | None = None
    """Regex over module names of attention blocks to freeze in the critic (None: the default)."""
    adaptive_lambda: bool = True
    """GAE lambda = 1 - 1/(alpha * l) per episode, l its action tokens (False: the fixed ``lam``)."""
    alpha: float = Field(1.5, gt=0)
    """Length-adaptive GAE lambda = 1 - 1/(alpha * l)."""
    lam: float = Field(0.95, ge=0, le=1)
    """Fixed GAE lambda, used only when ``adaptive_lambda`` is off (PPO's 0.95)."""
    gamma: float = Field(1.0, ge=0, le=1)
    """Discount per action token, for the advantages and the critic's targets (the paper: 1)."""
    episodes_per_update: int = Field(8, ge=1)
    """N: single-rollout episodes (distinct prompts) consumed per update, in completion order; the
    paper uses 128, 1 is the streaming extreme (agents/sao_streaming.yaml). The losses are token
    means, so one Adam step is about lr long whatever N; the ablation grid scales both lrs by
    sqrt(N/8) (Adam's square-root rule, Malladi et al. 2022) and the warm-up to the same ~80
    trajectories (leaderboards/ablations/grid.yaml)."""
    loss: str = "dis"
    """Policy loss by name: any of ``sao_env.algos.POLICY_LOSSES`` (dis, ppo_clip, pg, ...) or a
    segment-level DIS of ``sao_env.agents.segment_dis`` (dis_sequence, dis_step)."""
    eps_low: float | None = Field(None, gt=0, le=1, validation_alias=AliasChoices("eps_low", "dis_eps_low"))
    """Band (or clip) width below 1 (None: the scenario's DIS band, 0.3 reasoning / 0.8 coding)."""
    eps_high: float | None = Field(None, gt=0, validation_alias=AliasChoices("eps_high", "dis_eps_high"))
    """Band (or clip) width above 1 (None: the scenario's DIS band, 5.0 reasoning / 3.0 coding)."""
    dual_clip: float | None = Field(None, gt=1)
    """Dual-clip bound for negative advantages (ppo_clip only)."""
    whiten_advantages: bool = False
    """Whiten advantages over the batch's action tokens (off in the paper)."""
    advantage_values: Literal["before_fit", "after_fit"] = "before_fit"
    """Critic values the actor's advantages use: V_old, before the critic's K steps on this batch
    (default, as in PPO), or the values after them."""
    value_at: Literal["token", "prompt"] = "token"
    """Where the actor's advantage reads the critic: at every action token (GAE, the paper), or at the prompt only,
    A_t = G_t - V(s_0) at every action token, s_0 the state before the row's first action token and G_t the
    undiscounted return from t (agents/sao_prompt_value.yaml): a learned per-prompt baseline that has read none of
    the episode's own tokens or tool outputs. The critic trains on every token either way."""
    value_pretrain_episodes: int = Field(0, ge=0)
    """Value pretraining: episodes of the warm-start policy on phase-1 training tasks that the critic
    is fitted on before t=0 (0: off). Not charged to simulated time (``value_pretrain.py``)."""
    value_pretrain_steps: int = Field(40, ge=1)
    """Critic steps of the value pretraining, each on ``episodes_per_update`` of its episodes in turn."""

    omit_at_default: ClassVar[tuple[str, ...]] = (*AgentConfig.omit_at_default, "value_at")

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, name: str) -> str:
        known = (*POLICY_LOSS_NAMES, *SEGMENT_LOSS_NAMES)
        if name not in known:
            raise ValueError(f"unknown loss {name!r}; known: {', '.join(known)}")
        return name

    @model_validator(mode="after")
    def _frozen_pattern_needs_freezing(self):
        if self.critic_frozen_pattern is not None and not self.critic_freeze_attention:
            raise ValueError("critic_frozen_pattern is set but critic_freeze_attention is false")
        return self


class VAPOConfig(SAOConfig):
    """VAPO's and PPO's hyper-parameters (``sao_env.agents.vapo``): SAO's with the PPO clip loss."""

    loss: str = "ppo_clip"
    """Policy loss by name (``sao_env.algos.POLICY_LOSSES``); VAPO and PPO use ppo_clip."""
    eps_low: float | None = Field(0.2, gt=0, le=1)
    """PPO clip below 1 (None: the scenario's DIS band)."""
    eps_high: float | None = Field(0.28, gt=0)
    """PPO clip above 1, clip-higher when > eps_low (None: the scenario's DIS band)."""


class GRPOConfig(AgentConfig):
    """GRPO's hyper-parameters and its variants' (``sao_env.agents.grpo``)."""

    group_size: int = Field(4, ge=2)
    """G: rollouts sampled per prompt."""
    groups_per_update: int = Field(2, ge=1)
    """B: complete groups consumed per update."""
    loss: str = "ppo_clip"
    """Policy loss from ``sao_env.algos.POLICY_LOSSES``: ppo_clip, dis, pg, tis, mis_token, mis_seq or gspo."""
    eps_low: float | None = Field(0.2, gt=0, le=1)
    """Lower clip/band width (None: the scenario's DIS band); tis uses it for diagnostics only."""
    eps_high: float | None = Field(0.28, gt=0)
    """Upper clip/band width; > eps_low is clip-higher; tis truncates at 1 + eps_high (None: the scenario's)."""
    dual_clip: float | None = Field(None, gt=1)
    """Dual-clip bound for negative advantages (ppo_clip only)."""
    normalize_std: bool = True
    """Divide by the group's std (False: Dr. GRPO's mean-only centering)."""
    epochs: int = Field(1, ge=1)
    """Passes over each batch."""
    minibatches: int = Field(1, ge=1)
    """Gradient steps per pass (episodes split evenly)."""

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, name: str) -> str:
        if name not in POLICY_LOSS_NAMES:  # the message of sao_env.algos.check_policy_loss
            raise ValueError(f"unknown policy loss {name!r}; known: {', '.join(POLICY_LOSS_NAMES)}")
        return name


class RunningMeanConfig(AgentConfig):
    """The running-mean baseline's hyper-parameters (``sao_env.agents.baselines``)."""

    window: int = Field(128, ge=1)
    """Rewards in the running-mean baseline."""
    episodes_per_update: int = Field(8, ge=1)
    """Episodes consumed per update."""
    dis_eps_low: float | None = Field(None, gt=0, le=1)
    """DIS band below 1 (None: the scenario's)."""
    dis_eps_high: float | None = Field(None, gt=0)
    """DIS band above 1 (None: the scenario's)."""


class ReinforceConfig(AgentConfig):
    """REINFORCE's hyper-parameters (``sao_env.agents.baselines``)."""

    episodes_per_update: int = Field(8, ge=1)
    """Episodes consumed per update."""


class KeyedBaselineConfig(AgentConfig):
    """The prompt-dependent baselines' hyper-parameters (``sao_env.agents.prompt_baselines``)."""

    window: int = Field(128, ge=1)
    """Rewards kept per key (prompt or class) for its baseline."""
    discount: float = Field(1.0, gt=0, le=1)
    """Weight of each older reward of a key relative to the next newer one (1: a plain mean)."""
    global_window: int = Field(128, ge=1)
    """Rewards in the global running mean, the fallback for an unseen key (the running_mean recipe's)."""
    episodes_per_update: int = Field(8, ge=1)
    """Episodes consumed per update."""
    dis_eps_low: float | None = Field(None, gt=0, le=1)
    """DIS band below 1 (None: the scenario's)."""
    dis_eps_high: float | None = Field(None, gt=0)
    """DIS band above 1 (None: the scenario's)."""


CONFIGS: dict[str, type[AgentConfig]] = {
    "sao": SAOConfig, "grpo": GRPOConfig, "vapo": VAPOConfig, "running_mean": RunningMeanConfig,
    "reinforce": ReinforceConfig, "per_prompt": KeyedBaselineConfig, "oracle_class": KeyedBaselineConfig,
}
"""Each algorithm's config class by its name, as ``sao_env.agents.ALGORITHMS`` lists the agents."""


def build_hparams(config_cls: type[AgentConfig], hparams: dict[str, Any]) -> AgentConfig:
    """``config_cls`` of a recipe's ``hparams``; a bad key or value is one ``UserError`` naming
    ``agent.hparams.KEY`` (with a suggestion for an unknown key)."""
    try:
        return config_cls(**hparams)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        hint = ""
        if first["type"] == "extra_forbidden" and len(first["loc"]) == 1:
            hint = did_you_mean(first["loc"][0], config_cls.model_fields)
        raise UserError(f"invalid configuration at agent.hparams.{where}: {first['msg']}{hint}") from None


def check_hparams(agent: Any) -> None:
    """A recipe's ``hparams`` (``agent``: its raw mapping, overrides applied) checked by its algorithm's config
    class without torch: ``build_hparams``'s one-line error. A recipe this cannot read (no known algorithm,
    ``hparams`` not a mapping of names) is left to the full resolution, which names what is wrong."""
    if not isinstance(agent, dict):
        return
    algorithm, hparams = agent.get("algorithm"), agent.get("hparams", {})
    if not isinstance(algorithm, str) or algorithm not in CONFIGS or not isinstance(hparams, dict):
        return
    if not all(isinstance(k, str) for k in hparams):
        return
    build_hparams(CONFIGS[algorithm], hparams)
