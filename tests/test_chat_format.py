"""Conversations through an instruct model's chat template (``sao_env.policy.chat``, ``ScenarioSpec.chat``).

Checked with SmolLM2-135M-Instruct's own tokenizer and template: the pieces cut from the template against
ChatML written by hand; a whole multi-turn episode as the rollout loop and the warm start lay it out against
``apply_chat_template`` of the same messages (the reference), token for token; the plain-text format and
every existing scenario's hashes unchanged (the character model's runs and warm starts stay valid).
"""

from __future__ import annotations

import json
import hashlib

import numpy as np
import pytest
import torch

from sao_env.envs.text_env import load_scenario
from sao_env.errors import UserError
from sao_env.policy import packaged
from sao_env.policy.chat import ChatFormat, TextFormat, conversation_format, split_template
from sao_env.policy.model import ModelSpec, build_tokenizer
from sao_env.policy.tokenizer import build_char_tokenizer
from sao_env.policy.warmstart import _demonstration_batch, demonstration_tokens, warm_start_key, warm_start_path
from sao_env.runtime.rollout import play
from sao_env.scenario import ChatSpec, Scenario, ScenarioSpec
from sao_env.types import Turn

NAME = "smollm2-135m-instruct"
try:
    packaged.gguf_path(packaged.PACKAGED[NAME])
except UserError as err:
    pytest.skip(str(err), allow_module_level=True)

SYSTEM = "Use the tool."


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(ModelSpec(name=NAME))


def test_the_template_is_cut_where_chatml_puts_each_part(tokenizer):
    assert split_template(tokenizer, system=SYSTEM, observation_role="tool") == (
        "<|im_start|>system\nUse the tool.<|im_end|>\n<|im_start|>user\n",
        "<|im_end|>\n<|im_start|>assistant\n",
        "\n<|im_start|>tool\n",
        "<|im_end|>\n<|im_start|>assistant\n",
    )
    default_system = split_template(tokenizer, system=None, observation_role="user")
    assert default_system[0] == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                                 "Hugging Face<|im_end|>\n<|im_start|>user\n")
    assert default_system[2] == "\n<|im_start|>user\n"


def _reference(tokenizer, prompt, turns, *, system=SYSTEM, role="tool"):
    """apply_chat_template of the whole conversation, cut after the last EOS (where generation stops)."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    for k, turn in enumerate(turns):
        messages.append({"role": "assistant", "content": turn.action})
        if k < len(turns) - 1:
            messages.append({"role": role, "content": turn.observation})
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text.endswith("<|im_end|>\n")
    return tokenizer(text[:-1], add_special_tokens=False)["input_ids"]


def test_a_demonstration_is_the_template_of_its_conversation(tokenizer):
    layout = ChatFormat(tokenizer, system=SYSTEM)
    turns = [Turn("<py>print(mul(12, 34))</py>", "<out>408</out>\n"), Turn("\\boxed{408}")]
    prompt = "12*34=? (python tool: <py>code</py>)\n"
    row, trained = demonstration_tokens(tokenizer, prompt, turns, layout=layout)
    assert row == _reference(tokenizer, prompt, turns)
    eos = tokenizer.eos_token_id
    trained_text = tokenizer.decode([t for t, m in zip(row, trained) if m])
    assert trained_text == "<py>print(mul(12, 34))</py><|im_end|>\\boxed{408}<|im_end|>"
    assert [t for t, m in zip(row, trained) if m].count(eos) == 2
    assert tokenizer.decode(row[:trained.index(True)]).endswith("<|im_start|>assistant\n")


def test_the_rollout_loop_builds_the_same_tokens_as_the_template(tokenizer):
    """A real tool episode (sandboxed call, real observation) played with scripted actions."""
    spec = load_scenario("tool-drift").spec.model_copy(update={"chat": ChatSpec(system=SYSTEM)})
    scenario = Scenario(spec)
    task = scenario.eval_sets["v1"][0]
    a, b = task.reference["operands"]
    op = {"*": "mul", "+": "add"}[task.reference["op"]]
    actions = [f"<py>print({op}({a}, {b}))</py>", f"\\boxed{{{task.reference['answer']}}}"]

    def scripted(model, prompts, **kw):
        from sao_env.policy.generate import Sample
        text = actions[len(calls)]
        calls.append(list(prompts[0]))
        ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) + (tokenizer.eos_token_id,)
        return [Sample(token_ids=ids, logps=(-0.5,) * len(ids), finished=True)]

    calls = []
    (rollout,) = play(None, tokenizer, [task], spec, env_seeds=[0], sampler=scripted)
    assert rollout.reward == 1.0 and rollout.transcript.count("<out>") == 1
    observation = rollout.transcript[len(actions[0]):rollout.transcript.index(actions[1])]
    assert observation == f"<out>{task.reference['answer']}</out>\n"
    turns = [Turn(actions[0], observation), Turn(actions[1])]
    assert rollout.tokens_T == _reference(tokenizer, task.prompt, turns)
    assert calls[1] == rollout.tokens_T[:len(calls[1])]
    mask = np.array(rollout.action_mask_T)
    assert tokenizer.decode(np.array(rollout.tokens_T)[mask].tolist()) == "<|im_end|>".join(actions) + "<|im_end|>"


def test_warm_start_batches_attend_to_the_eos_that_is_also_the_pad(tokenizer):
    spec = load_scenario("tool-drift").spec.model_copy(update={"chat": ChatSpec(system=SYSTEM)})
    tokens, labels, attention = _demonstration_batch(tokenizer, Scenario(spec), np.random.default_rng(0), 4, 0)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    for row, mask, label in zip(tokens, attention, labels):
        length = int(mask.sum())
        assert mask[:length].all() and not mask[length:].any()
        eos = row[:length] == tokenizer.eos_token_id
        assert eos.sum() == 5  # the ends of the system, user and tool messages, of the call and of the answer
        assert (label[:length][eos] == tokenizer.eos_token_id).sum() == 2  # the policy's two are trained on
        assert label[length - 1] == tokenizer.eos_token_id


def test_plain_text_is_the_prompt_as_written():
    tok = build_char_tokenizer()
    layout = conversation_format(tok, None)
    assert type(layout) is TextFormat
    assert layout.prompt_ids("3+4=?\n") == tuple(tok("3+4=?\n", add_special_tokens=False)["input_ids"])
    assert layout.observation_ids("") == ()


def test_a_tokenizer_without_a_template_is_one_line():
    with pytest.raises(UserError, match="has no chat template: use an instruct model") as err:
        ChatFormat(build_char_tokenizer())
    assert "\n" not in str(err.value)


# Before the chat key existed (commit 58499f9): warm-start keys of the tiny model and configuration hashes.
EARLIER_KEYS = {"style-drift": ("12ae1d38aed9bb3f", "c99ac0050844f7be"),
                "tool-drift": ("3f86d66618775910", "99c82b604eb7f1d1"),
                "codebase-drift": ("c34204caee325718", "1e98eb7b695c7bf2")}


@pytest.mark.parametrize("env", sorted(EARLIER_KEYS))
def test_scenarios_without_chat_keep_their_hashes(env):
    scenario = load_scenario(env)
    if env == "tool-drift":  # its held-out set grew from 32 prompts a phase for evaluation version 3
        scenario = Scenario(scenario.spec.model_copy(update={"eval": scenario.spec.eval.model_copy(update={"prompts_per_phase": 32})}))
    config_hash = hashlib.sha256(json.dumps(scenario.spec.model_dump(), sort_keys=True).encode()).hexdigest()[:16]
    assert (warm_start_key(ModelSpec(), scenario, scenario.spec.warm_start), config_hash) == EARLIER_KEYS[env]


def test_the_chat_layout_and_the_pretrained_switch_enter_the_warm_start():
    base = load_scenario("style-drift").spec
    chat = base.model_copy(update={"chat": ChatSpec(system="a")})
    other = base.model_copy(update={"chat": ChatSpec(system="b")})
    keys = {warm_start_key(ModelSpec(), Scenario(s), s.warm_start) for s in (base, chat, other)}
    assert len(keys) == 3
    pretrained = base.warm_start.model_copy(update={"pretrained": True})
    assert warm_start_path(ModelSpec(name=NAME), Scenario(base)) is None
    assert warm_start_path(ModelSpec(name=NAME), Scenario(base.model_copy(update={"warm_start": pretrained}))) is not None
    assert "pretrained" not in base.warm_start.model_dump() and pretrained.model_dump()["pretrained"] is True
