"""Rollouts served by a vLLM engine, behind the same interface as ``generate.sample``.

Selected by ``runtime.generator: vllm`` on the ``threads`` and ``ray`` backends and imported only then. The engine
runs in the vLLM environment (``engine/server.py``, started by ``engine/process.py``); this side is its client:

- ``from_policy`` saves the policy and tokenizer once to a folder and starts the engine on it;
- ``load_weights`` writes a published version's weights to one safetensors file (on ``/dev/shm`` where there is
  one) and the engine reloads them in place (vLLM's ``reload_weights``): no restart;
- ``sample`` returns, per prompt, the sampled token ids and the log-probability of each under the weights the
  engine serves: the behaviour policy's, which the learner's importance ratios need. Training rollouts are
  untempered (``RuntimeSpec._untempered``), so vLLM's raw log-probabilities are the sampling distribution's.

Each row samples from its own seed (``row_key``), so a row's draw does not depend on the batch it shares; the
stream is vLLM's, not ours, so the tokens differ from the ``hf`` generator's for the same key. The gap between the
engine's log-probabilities and the learner's forward on the same tokens is measured in bench/bench_vllm.py
(docs/performance.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch

from sao_env.engine.process import Server, engine_server
from sao_env.policy.generate import Sample


def sampling_params(row_key: int, *, max_new_tokens: int, eos_token_id: int, temperature: float,
                    top_p: float) -> dict[str, Any]:
    """One row's sampling parameters for the engine: its own seed, stop at EOS."""
    return {"max_tokens": int(max_new_tokens), "temperature": float(temperature), "top_p": float(top_p),
            "seed": int(row_key) % 2**63, "stop_token_ids": [int(eos_token_id)]}


def to_sample(token_ids: Sequence[int], logprobs: Sequence[float], eos_token_id: int) -> Sample:
    """One engine completion as a ``Sample``; a log-probability is required for every token."""
    if len(logprobs) != len(token_ids):
        raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} log-probabilities from the engine")
    ids = tuple(int(t) for t in token_ids)
    return Sample(token_ids=ids, logps=tuple(float(x) for x in logprobs), finished=bool(ids) and ids[-1] == eos_token_id)


def weights_file(state_dict: dict[str, torch.Tensor], folder: Path) -> Path:
    """The weights as one safetensors file of Hugging Face names; of tensors that share storage (tied embeddings)
    only the first name is written, as the engine's model ties them itself."""
    from safetensors.torch import save_file

    path = folder / "weights.safetensors"
    partial = folder / "weights.safetensors.partial"
    unique, seen = {}, set()
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            unique[name] = tensor.detach().to("cpu").contiguous()
    save_file(unique, str(partial))
    os.replace(partial, path)
    return path


def scratch_folder(prefix: str) -> Path:
    """A private folder in memory (``/dev/shm``) where there is one, else in the temporary folder."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None))


class VLLMGenerator:
    """A vLLM engine serving one run's policy; ``sample`` has ``generate.sample``'s signature."""

    def __init__(self, server: Server, folder: Path, version: int = 0):
        self.server, self.folder, self.version = server, folder, version
        self.load_seconds: list[float] = []

    @classmethod
    def from_policy(cls, policy, tokenizer, *, version: int = 0, threads: int = 1, dtype: str = "float32",
                    seed: int = 0, compile: bool = False, log_dir: Path | None = None) -> "VLLMGenerator":
        """An engine started from the policy's current weights (saved once to a scratch folder)."""
        folder = scratch_folder("sao-vllm-")
        try:
            policy.save_pretrained(folder / "model")
            tokenizer.save_pretrained(folder / "model")
            server = engine_server(folder / "model", threads=threads, dtype=dtype, seed=seed, version=version,
                                   compile=compile, log_dir=log_dir)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        shutil.rmtree(folder / "model", ignore_errors=True)
        return cls(server, folder, version)

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Load a published version's weights into the running engine, in place."""
        path = weights_file(state_dict, self.folder)
        try:
            reply = self.server.post("/load_weights", {"path": str(path), "version": int(version)})
        finally:
            path.unlink(missing_ok=True)
        self.load_seconds.append(float(reply["seconds"]))
        self.version = version

    def sample(self, model, prompts: list[list[int]], *, max_new_tokens: int, eos_token_id: int, pad_token_id: int,
               generator: torch.Generator | None = None, row_keys: Sequence[int] | None = None,
               temperature: float = 1.0, top_p: float = 1.0) -> list[Sample]:
        """One continuation per prompt (``model`` is ignored: the engine holds the weights)."""
        if row_keys is None:
            raise ValueError("the vLLM generator samples per-row streams: pass row_keys")
        params = [sampling_params(k, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                  temperature=temperature, top_p=top_p) for k in row_keys]
        reply = self.server.post("/generate", {"prompts": [list(map(int, p)) for p in prompts], "params": params})
        if reply.get("version") != self.version:
            raise RuntimeError(f"the engine serves version {reply.get('version')}, the run expects {self.version}")
        return [to_sample(s["token_ids"], s["logprobs"], eos_token_id) for s in reply["samples"]]

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.folder, ignore_errors=True)
