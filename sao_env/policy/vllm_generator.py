"""Rollouts served by a vLLM engine (GPU), behind the same interface as ``generate.sample``.

Selected by ``runtime.generator: vllm`` on the ``threads`` and ``ray`` backends and imported only
then: each rollout worker builds one engine from the policy's weights and, when a new version is
published, loads the new weights into it in place (no restart, no files). ``sample`` returns, per
prompt, the sampled token ids and the log-probability of each under the policy the engine serves,
which is what the learner's importance ratios need. Training rollouts are untempered
(``RuntimeSpec._untempered``), so vLLM's raw log-probabilities are the sampling distribution's.

Each row samples from its own seed (``row_key``), so a row's draw does not depend on the batch it
shares; unlike ``generate.sample`` the stream is vLLM's, not ours, so the tokens differ from the
``hf`` generator's for the same key.

The GPU recipe (one learner GPU + N rollout GPUs) is in docs/runtime.md.
"""

from __future__ import annotations

import tempfile
from typing import Any, Iterable, Sequence

import torch

from sao_env.errors import UserError
from sao_env.policy.generate import Sample


def import_vllm():
    """The ``vllm`` module, or a one-line error naming the extra that installs it."""
    try:
        import vllm
    except ImportError:
        raise UserError("runtime.generator=vllm needs vLLM (a CUDA GPU): pip install '.[vllm]'") from None
    return vllm


def sampling_kwargs(row_key: int, *, max_new_tokens: int, eos_token_id: int, temperature: float,
                    top_p: float) -> dict[str, Any]:
    """``vllm.SamplingParams`` of one row: one sample, its own seed, stop at EOS, the sampled token's log-prob."""
    return {"n": 1, "max_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
            "seed": int(row_key) % 2**63, "stop_token_ids": [eos_token_id], "logprobs": 0,
            "detokenize": False, "skip_special_tokens": False}


def to_sample(token_ids: Sequence[int], logprobs: Sequence[dict], eos_token_id: int) -> Sample:
    """One vLLM completion (its ``token_ids`` and per-position ``logprobs`` dicts) as a ``Sample``.

    vLLM gives, at each position, a dict from token id to a ``Logprob`` (or a float) that holds at
    least the sampled token; the log-probability kept is the sampled token's.
    """
    if len(logprobs) != len(token_ids):
        raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} log-prob entries: ask vLLM for logprobs=0")
    logps = []
    for token, entry in zip(token_ids, logprobs):
        value = entry[token]
        logps.append(float(getattr(value, "logprob", value)))
    ids = tuple(int(t) for t in token_ids)
    return Sample(token_ids=ids, logps=tuple(logps), finished=bool(ids) and ids[-1] == eos_token_id)


def named_tensors(state_dict: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """The weights as the ``(name, tensor)`` pairs a vLLM model's ``load_weights`` takes (Hugging Face names)."""
    return [(name, tensor.detach().to("cpu")) for name, tensor in state_dict.items()]


class WeightLoader:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``): loads published weights into its model."""

    def sao_load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.model_runner.model.load_weights(weights=list(weights))  # type: ignore[attr-defined]


class VLLMGenerator:
    """A vLLM engine serving one rollout worker's policy; ``sample`` is ``generate.sample``'s signature."""

    def __init__(self, engine, version: int = 0):
        self.engine, self.version = engine, version

    @classmethod
    def from_policy(cls, policy, tokenizer, *, gpu_memory_utilization: float = 0.85) -> "VLLMGenerator":
        """An engine on this process's GPU, started from the policy's current weights (saved to a temporary folder)."""
        vllm = import_vllm()
        if not torch.cuda.is_available():
            raise UserError("runtime.generator=vllm needs a CUDA GPU in each rollout worker; use generator=hf on CPU")
        folder = tempfile.mkdtemp(prefix="sao-vllm-")
        policy.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        engine = vllm.LLM(model=folder, dtype="float32", enforce_eager=True, gpu_memory_utilization=gpu_memory_utilization,
                          worker_extension_cls=f"{__name__}.WeightLoader")
        return cls(engine)

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Load a published version's weights into the running engine, in place."""
        self.engine.collective_rpc("sao_load_weights", args=(named_tensors(state_dict),))
        self.version = version

    def sample(self, model, prompts: list[list[int]], *, max_new_tokens: int, eos_token_id: int, pad_token_id: int,
               generator: torch.Generator | None = None, row_keys: Sequence[int] | None = None,
               temperature: float = 1.0, top_p: float = 1.0) -> list[Sample]:
        """One continuation per prompt (``model`` is ignored: the engine holds the weights)."""
        if row_keys is None:
            raise ValueError("the vLLM generator samples per-row streams: pass row_keys")
        vllm = import_vllm()
        params = [vllm.SamplingParams(**sampling_kwargs(k, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                                        temperature=temperature, top_p=top_p)) for k in row_keys]
        outputs = self.engine.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        return [to_sample(o.outputs[0].token_ids, o.outputs[0].logprobs, eos_token_id) for o in outputs]
