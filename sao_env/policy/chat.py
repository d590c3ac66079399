"""How a conversation becomes tokens: raw text (the character model) or an instruct model's chat template.

An episode is the prompt, then the policy's actions, each ended by the EOS token it generated, with the
environment's observations between them (``sao_env.runtime.rollout``). ``TextFormat`` feeds the prompt and
every observation as their own text, as the tiny models were trained. ``ChatFormat`` renders them through the
tokenizer's chat template, as an instruct model saw its conversations in post-training: the prompt is a
user message (after an optional system message) opened for the assistant's reply, and an observation is the
rest of the template between the assistant's end of turn and the next assistant turn (for ChatML:
``"\\n<|im_start|>tool\\n<out>56088</out>\\n<|im_end|>\\n<|im_start|>assistant\\n"``), so the tokens the policy
is trained on are exactly those it would see when served through a chat API.

Both formats give ``prompt_ids(text)`` and ``observation_ids(text)``; the rollout loop, the warm start's
demonstrations and the evaluation use the same object, so training and evaluation see one layout.
"""

from __future__ import annotations

import functools

from transformers import PreTrainedTokenizerBase

from sao_env.errors import UserError

PROBE_PROMPT, PROBE_ACTION, PROBE_OBSERVATION = "\x00prompt\x00", "\x00action\x00", "\x00observation\x00"
"""Placeholders rendered through the template to find where each part of a conversation sits in its text."""


def _ids(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else ()


class TextFormat:
    """The conversation as plain text: the prompt and each observation as written (no template)."""

    name = "text"

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer

    def prompt_text(self, prompt: str) -> str:
        return prompt

    def observation_text(self, observation: str) -> str:
        return observation

    def prompt_ids(self, prompt: str) -> tuple[int, ...]:
        return _cached_ids(self.tokenizer, self.prompt_text(prompt))

    def observation_ids(self, observation: str) -> tuple[int, ...]:
        return _cached_ids(self.tokenizer, self.observation_text(observation)) if observation else ()


class ChatFormat(TextFormat):
    """The conversation through the tokenizer's chat template (``ScenarioSpec.chat``).

    ``system`` is the system message (None: the template's own default, if it has one); ``observation_role``
    the role an environment's observation is sent as (``tool`` or ``user``). The template is rendered once
    with placeholders and cut into a prompt's opening, a prompt's closing, and an observation's opening and
    closing (``split_template``); a template that does not render the placeholders in order is refused.
    """

    name = "chat"

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, system: str | None = None,
                 observation_role: str = "tool"):
        super().__init__(tokenizer)
        if not getattr(tokenizer, "chat_template", None):
            raise UserError(f"the scenario asks for the chat format, but the tokenizer "
                            f"{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__!r} has no chat "
                            "template: use an instruct model (e.g. agent.model.name=smollm2-135m-instruct)")
        self.system, self.observation_role = system, observation_role
        self.prompt_before, self.prompt_after, self.observation_before, self.observation_after = split_template(
            tokenizer, system=system, observation_role=observation_role)

    def prompt_text(self, prompt: str) -> str:
        return self.prompt_before + prompt + self.prompt_after

    def observation_text(self, observation: str) -> str:
        return self.observation_before + observation + self.observation_after

    def observation_ids(self, observation: str) -> tuple[int, ...]:
        """An empty observation (a tool that printed nothing) is still a turn of the conversation: its role's
        opening and closing, and the next assistant turn's header."""
        return _cached_ids(self.tokenizer, self.observation_text(observation))


def split_template(tokenizer: PreTrainedTokenizerBase, *, system: str | None,
                   observation_role: str) -> tuple[str, str, str, str]:
    """The text around a prompt and around an observation in ``tokenizer``'s chat template.

    Renders ``[system?, user: P, assistant: A, <role>: O]`` with the generation prompt; the text after the
    action's EOS token up to the observation, and from the observation to the end, wrap every observation.
    """
    eos = tokenizer.eos_token
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": PROBE_PROMPT}, {"role": "assistant", "content": PROBE_ACTION},
        {"role": observation_role, "content": PROBE_OBSERVATION}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as err:  # jinja's errors: a template that rejects the roles
        raise UserError(f"the chat template cannot render a {observation_role!r} message: {err}") from None
    positions = [text.find(p) for p in (PROBE_PROMPT, PROBE_ACTION, PROBE_OBSERVATION)]
    if -1 in positions or positions != sorted(positions):
        raise UserError("the chat template does not render the prompt, the reply and the observation in order")
    p, a, o = positions
    before_prompt, after_prompt = text[:p], text[p + len(PROBE_PROMPT):a]
    after_action = text[a + len(PROBE_ACTION):o]
    if not eos or not after_action.startswith(eos):
        raise UserError(f"the chat template does not end the assistant's turn with the EOS token {eos!r}, "
                        "which is where generation stops")
    return before_prompt, after_prompt, after_action[len(eos):], text[o + len(PROBE_OBSERVATION):]


def conversation_format(tokenizer: PreTrainedTokenizerBase, chat) -> TextFormat:
    """The scenario's format: ``chat`` is its ``ChatSpec`` (None: plain text)."""
    if chat is None:
        return TextFormat(tokenizer)
    return _chat_format(tokenizer, chat.system, chat.observation_role)


@functools.lru_cache(maxsize=16)
def _chat_format(tokenizer, system, observation_role) -> ChatFormat:
    return ChatFormat(tokenizer, system=system, observation_role=observation_role)


@functools.lru_cache(maxsize=1 << 14)
def _cached_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[int, ...]:
    """Token ids of a prompt or an observation, remembered: held-out prompts recur at every evaluation."""
    return _ids(tokenizer, text)
