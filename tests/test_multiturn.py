"""The multi-turn seam: how a conversation becomes tokens, for the warm start and for rollouts.

The warm start's layout (``demonstration_tokens``) is checked against a case written by hand; the
rollout loop (``play``) is checked on the real Python-tool env with a warm-started policy: tokens
alternate action / observation exactly as the env answered, observations carry no log-prob and no
version, and the critic's skip-observation GAE sees only action positions.
"""

from __future__ import annotations

import pytest

from sao_env.policy.tokenizer import build_char_tokenizer
from sao_env.policy.warmstart import demonstration_tokens
from sao_env.types import Turn


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def test_demonstration_tokens_by_hand(tokenizer):
    ids = {ch: tokenizer.convert_tokens_to_ids(ch) for ch in "abxyOK\n"}
    eos = tokenizer.eos_token_id
    row, trained = demonstration_tokens(tokenizer, "ab", [Turn("x", "OK\n"), Turn("y", "never shown")])
    assert row == [ids["a"], ids["b"], ids["x"], eos, ids["O"], ids["K"], ids["\n"], ids["y"], eos]
    assert trained == [False, False, True, True, False, False, False, True, True]


def test_a_single_turn_demonstration_is_one_action(tokenizer):
    as_text = demonstration_tokens(tokenizer, "ab", "xy")
    as_turn = demonstration_tokens(tokenizer, "ab", [Turn("xy")])
    assert as_text == as_turn
    assert as_text[1] == [False, False, True, True, True]
