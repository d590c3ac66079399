"""``RuntimeSpec``: how rollouts and the learner are scheduled (agents/*.yaml ``runtime:``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from sao_env.config_dump import OmitDefaults


class RuntimeSpec(OmitDefaults):
    """How rollouts and the learner are scheduled (agents/*.yaml ``runtime:``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    omit_at_default: ClassVar[tuple[str, ...]] = ("engine_dtype",)

    backend: Literal["sim", "threads", "ray"] = "sim"
    """Engine: ``sim`` (discrete-event, simulated clock, deterministic), ``threads`` (one machine, learner
    and rollout workers concurrent in wall-clock time) or ``ray`` (rollout workers as Ray actors). See docs/runtime.md."""
    max_staleness: int = Field(4, ge=0)
    """Learner updates an episode may lag behind; 0 = synchronous on-policy."""
    buffer_capacity: int = Field(64, ge=1)
    """Completed episodes the buffer holds before producers block."""
    on_full: Literal["block", "drop_oldest"] = "block"
    """Full buffer: block the producer (default) or drop the oldest group (counted and logged)."""
    temperature: float = Field(1.0, gt=0)
    """Rollout sampling temperature; must be 1 for training (see ``_untempered``)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Rollout nucleus sampling; must be 1 for training (see ``_untempered``)."""
    batch_generation: bool = True
    """Generate the requests started under the same weights together, as one batch. Each episode
    samples from its own stream (seed, request, member), so the run equals one-request-at-a-time
    generation up to float rounding between batch shapes (tests/test_batched_generation.py)."""
    time_scale: float = Field(0.05, gt=0, le=100)
    """Real-time backends: wall-clock seconds per scenario second. Phases last ``duration x time_scale``
    of wall clock, and the latency model's environment waits are injected scaled by it (``sim`` ignores it).
    At most 100 (a hundred times slower than the scenario's clock): a larger scale never ends."""
    workers: int | None = Field(None, ge=1)
    """Real-time backends: rollout workers (threads or Ray actors), each playing up to its share of the
    rollout slots as one batch (default: one per CPU of this machine, at most ``rollout_slots // group_size``)."""
    generator: Literal["hf", "vllm"] = "hf"
    """Real-time backends: ``hf`` samples with the training model's own forward; ``vllm`` serves rollouts
    from a vLLM engine in its own environment (``make install-vllm``; ``sao_env/engine/``)."""
    engine_dtype: Literal["float32", "bfloat16"] = "float32"
    """``generator=vllm``: the engine's dtype. In float32 its log-probabilities are the float32 learner's to 6e-5; in
    bfloat16 it is faster (1.5x at batch 16 compiled, on the CPU) and its gap is real (mean 0.04 nats per token, KL
    1.7e-3 for SmolLM2-135M: docs/performance.md), the gap the DIS/TIS/MIS corrections are for."""
    address: str | None = None
    """``ray`` backend: the cluster to join (``ray.init(address=...)``, e.g. ``auto``); none starts a local one."""
    ray_num_cpus: int | None = Field(None, ge=1)
    """``ray`` backend, local cluster only: CPUs it may use (default: all)."""
    rollout_mismatch: Literal["none", "bf16_weights", "logit_noise"] = "none"
    """Rollout/trainer mismatch (``sim`` only): rollouts (and held-out evaluation) sample a perturbed copy of the
    policy while the learner trains the exact float32 one; ``bf16_weights`` rounds the copy's weights to bfloat16,
    ``logit_noise`` perturbs its logits by ``rollout_noise_std`` (``sao_env.policy.mismatch``). Off by default."""
    rollout_noise_std: float = Field(0.1, ge=0, le=10)
    """``logit_noise`` only: std of the logit perturbation, in units of the final hidden state's RMS."""
    critic_parallel: bool = False
    """``sim``, SAO: the critic trains on a device of its own, so an update costs max(actor, critic)
    passes per token instead of their sum (docs/runtime.md)."""

    @model_validator(mode="after")
    def _untempered(self) -> "RuntimeSpec":
        """The learner's ratios pi_theta / pi_rollout compare against the plain softmax; rollouts drawn
        from a tempered or truncated distribution would bias every ratio, so training refuses them."""
        if self.temperature != 1.0 or self.top_p != 1.0:
            raise ValueError(f"temperature={self.temperature} / top_p={self.top_p}: rollouts for training must "
                             f"sample the policy itself (1.0 / 1.0), or every importance ratio is biased")
        return self

    @model_validator(mode="after")
    def _engine_dtype_needs_vllm(self) -> "RuntimeSpec":
        if self.engine_dtype != "float32" and self.generator != "vllm":
            raise ValueError(f"engine_dtype={self.engine_dtype} is the vLLM engine's: it needs generator=vllm")
        return self

    @model_validator(mode="after")
    def _mismatch_needs_sim(self) -> "RuntimeSpec":
        """The perturbed copy is made where ``sim`` deploys its weights; the real-time backends publish theirs
        to workers (and vLLM) elsewhere, and would not perturb them."""
        if self.rollout_mismatch != "none" and self.backend != "sim":
            raise ValueError(f"rollout_mismatch={self.rollout_mismatch} needs backend=sim (this is {self.backend})")
        return self
