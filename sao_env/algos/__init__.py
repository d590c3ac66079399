"""Algorithm building blocks: advantage estimators and losses as pure tensor functions.

See ``advantages.py`` and ``losses.py`` for the shared shape contract, and docs/metrics.md for
the metrics they emit. Registries map a name to functions of one signature each.
"""

from sao_env.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    adaptive_lambda,
    broadcast_sequence_advantages,
    dr_grpo_advantages,
    gae,
    group_advantages,
    grpo_advantages,
    keyed_baseline_advantages,
    masked_mean,
    masked_whiten,
    running_mean_advantages,
)
from sao_env.algos.diagnostics import (
    DIAGNOSTICS,
    effective_sample_size,
    explained_variance,
    off_policy_diagnostics,
    sequence_log_ratio,
    value_diagnostics,
)
from sao_env.algos.losses import (
    AGG_MODES,
    POLICY_LOSSES,
    agg_loss,
    check_policy_loss,
    dis_policy_loss,
    gspo_policy_loss,
    mis_seq_policy_loss,
    mis_token_policy_loss,
    policy_gradient_loss,
    ppo_clip_loss,
    tis_policy_loss,
    value_loss,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "DIAGNOSTICS",
    "POLICY_LOSSES",
    "adaptive_lambda",
    "agg_loss",
    "broadcast_sequence_advantages",
    "check_policy_loss",
    "dis_policy_loss",
    "dr_grpo_advantages",
    "effective_sample_size",
    "explained_variance",
    "gae",
    "group_advantages",
    "grpo_advantages",
    "keyed_baseline_advantages",
    "gspo_policy_loss",
    "masked_mean",
    "masked_whiten",
    "mis_seq_policy_loss",
    "mis_token_policy_loss",
    "off_policy_diagnostics",
    "policy_gradient_loss",
    "ppo_clip_loss",
    "running_mean_advantages",
    "sequence_log_ratio",
    "tis_policy_loss",
    "value_diagnostics",
    "value_loss",
]
