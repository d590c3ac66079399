"""Rollout/trainer mismatch: the rollout engine samples from a perturbed copy of the policy.

In asynchronous RL the inference engine's log-probabilities differ from the trainer's for the same
weights (bf16 sampling against fp32 training, other kernels, quantised rollouts); truncated and
masked importance sampling (TIS, IcePop) were made for that gap, beside staleness. The ``sim``
backend reproduces it with ``RuntimeSpec.rollout_mismatch``: each time it deploys weights (at the
start and after every update that changed them) it makes its deployed copy a perturbed version
of the trained weights, and every rollout, with its recorded log-probabilities, comes from that
copy; the learner keeps training the exact float32 weights and sees the gap in its ratios
(``actor/logp_gap``, ``actor/kl_k3``, ``actor/out_band_*``; docs/metrics.md). Held-out evaluation
also runs on the deployed copy, as a served model would.

Modes:
    none          the deployed copy is the trained weights (the default).
    bf16_weights  every floating-point parameter of the copy is rounded to bfloat16 (round to
                  nearest even) and kept in its own dtype, so the sampler computes in float32 with
                  bf16-precision weights: each weight moves by at most 2^-8 of its magnitude. The
                  weights' share of a bf16 engine's gap; bf16 activations and accumulation are not
                  modelled. Deterministic, no random draw.
    logit_noise   the copy's output matrix W (vocabulary V x hidden H) becomes W + (sigma / sqrt(H)) Z,
                  Z iid standard normal, drawn by a CPU ``torch.Generator`` seeded with
                  ``row_key(seed, version, MISMATCH_STREAM)``: a pure function of the run's seed and
                  the deployed version (the same after a resume), redrawn at every version. For a final
                  hidden state h the logits z = W h move by delta = (sigma / sqrt(H)) Z h, independent
                  across the vocabulary with std sigma * rms(h) (rms(h) = ||h|| / sqrt(H)); the same h
                  always gets the same delta, like a deterministic kernel difference. sigma is
                  ``RuntimeSpec.rollout_noise_std``. Where the input embedding is tied to W (the tiny
                  models), the copy gets an output matrix of its own, so its inputs stay exact.
"""

from __future__ import annotations

import math

import torch

from sao_env.policy.generate import row_key

MODES = ("none", "bf16_weights", "logit_noise")
MISMATCH_STREAM = 0x4D49534D
"""Third part of the noise generator's key (``row_key(seed, version, MISMATCH_STREAM)``)."""


class RolloutMismatch:
    """Makes a deployed copy of the policy the perturbed rollout model of one mode (see the module docstring)."""

    def __init__(self, mode: str, *, seed: int, noise_std: float = 0.0):
        if mode not in MODES:
            raise ValueError(f"unknown rollout_mismatch {mode!r}; known: {', '.join(MODES)}")
        if not noise_std >= 0:
            raise ValueError(f"rollout_noise_std must be >= 0, got {noise_std}")
        self.mode, self.seed, self.noise_std = mode, seed, noise_std

    def noise(self, shape: torch.Size, version: int) -> torch.Tensor:
        """Z of ``logit_noise`` for ``version``: standard normal float32 on the CPU, a pure function of (seed, version)."""
        generator = torch.Generator().manual_seed(row_key(self.seed, version, MISMATCH_STREAM))
        return torch.randn(shape, generator=generator, dtype=torch.float32)

    @torch.no_grad()
    def apply(self, deployed: torch.nn.Module, trained: torch.nn.Module, version: int) -> None:
        """Perturb ``deployed`` in place; call it right after it was made an exact copy of ``trained`` at ``version``.

        ``trained`` is only read (the output matrix of ``logit_noise`` is rebuilt from it).
        """
        if self.mode == "bf16_weights":
            for p in deployed.parameters():
                if p.is_floating_point():
                    p.copy_(p.to(torch.bfloat16).to(p.dtype))
        elif self.mode == "logit_noise":
            head = deployed.get_output_embeddings()
            if head.weight is deployed.get_input_embeddings().weight:
                _untie(head)
            source = trained.get_output_embeddings().weight  # (V, H)
            z = self.noise(source.shape, version).to(device=source.device, dtype=source.dtype)
            head.weight.copy_(source + (self.noise_std / math.sqrt(source.shape[1])) * z)


def _untie(head: torch.nn.Module) -> None:
    """Give ``head`` an output matrix of its own, as a buffer: the module's parameter list (the shared
    matrix counted once, under the input embedding) and its state_dict keys stay as they were."""
    shared = head.weight
    del head.weight
    head.register_buffer("weight", shared.detach().clone())
