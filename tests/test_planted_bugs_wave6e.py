"""Issue #50, wave 6: one test per survivor of the mechanical rounds (``bench/mutants.py --since 1cf44aa``, seeds 1
and 2: one-token changes to the lines this wave added). Each names its change, fails with it and passes without it,
and asserts values worked out here. Survivors that change no behaviour (equivalent mutants) are listed in
docs/testing.md, not here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_a_pool_that_finished_cleanly_leaves_requests_allowed():
    """Changed: ``finished = True`` -> ``False`` in ``_pool.each_done``: a clean finish then stops every request
    (``_http.STOP`` set), so the command's next request is refused."""
    from sao_env.benchmarks import _http
    from sao_env.benchmarks._pool import each_done

    got = sorted(each_done([3, 1, 2], lambda x: x * 10, workers=2))
    assert got == [(0, 30), (1, 10), (2, 20)]
    assert not _http.STOP.is_set()
    with pytest.raises(ValueError, match="boom"):
        list(each_done([1], lambda x: (_ for _ in ()).throw(ValueError("boom")), workers=1))
    assert _http.STOP.is_set()  # a failure does stop them
    _http.reset_stop()


def test_a_judge_reply_that_is_not_text_is_shown_by_its_first_500_characters(monkeypatch):
    """Changed: ``str(content)[:500]`` -> ``[:501]`` in ``LLMJudge.grade``."""
    from sao_env.benchmarks import llm_grader
    from sao_env.types import Task

    content = {"verdict": "x" * 2000}
    monkeypatch.setattr(llm_grader, "post_json", lambda *a, **k: {"choices": [{"message": {"content": content}}]})
    judge = llm_grader.LLMJudge("judge", base_url="http://127.0.0.1:9")
    task = Task(id="t", prompt="1+1?", reference={"answer": "2"}, grader="math_verify")
    result = judge.grade(task, "2")
    assert result.details["judge_reply"] == "{'verdict': '" + "x" * 487
    assert len(result.details["judge_reply"]) == 500


@pytest.fixture(scope="module")
def found():
    """The matrix's places from the committed boards and maps."""
    from sao_env.leaderboard.finding import places

    return places(REPO / "leaderboards")


def test_the_matrix_marks_each_group_start_in_the_head_and_in_every_row(found):
    """Changed: ``found[i - 1].group != p.group`` -> ``==`` for the body cells of ``finding.matrix_html``."""
    from sao_env.leaderboard.finding import matrix_html

    starts = [i for i in range(1, len(found)) if found[i - 1].group != found[i].group]
    assert starts, "the committed boards and maps make more than one group"
    page = matrix_html(found)
    head = re.findall(r'<th class="(place[^"]*)" scope="col"', page)
    assert [i for i, cls in enumerate(head) if "gstart" in cls] == starts
    rows = re.findall(r"<tr data-arm=.*?</tr>", page)
    assert rows
    for row in rows:
        cells = re.findall(r'<td class="([^"]*)"', row)
        assert len(cells) == len(found)
        assert [i for i, cls in enumerate(cells) if "gstart" in cls] == starts


def test_a_critic_built_without_the_flag_freezes_its_attention_as_the_paper():
    """Changed: ``Critic(..., freeze_attention: bool = True)`` -> ``False``: SAO's value model keeps the
    policy's attention fixed (ARCHITECTURE.md) unless an ablation says otherwise."""
    from sao_env.agents.critic import Critic
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    spec = ModelSpec()
    policy = build_policy(spec, build_tokenizer(spec))
    critic = Critic(policy, lr=1e-3, grad_clip=1.0, agg="token-mean")
    frozen = {n for n, p in critic.model.named_parameters() if not p.requires_grad}
    attention = {n for n, _ in critic.model.named_parameters() if ".self_attn." in n}
    assert attention and frozen == attention
    assert len(critic.params) == sum(1 for _ in critic.model.parameters()) - len(attention)


def test_a_clean_reap_finds_nothing_and_an_orphan_is_counted_once(tmp_path):
    """Changed: ``removed = 0`` -> ``1`` in ``local.reap_mounts`` (now ``workdir.reap_mounts``): the count of
    unmounted orphans is exact."""
    from test_sandbox_disk_cap import orphaned_cap

    from sao_env.sandbox.workdir import reap_mounts

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    reap_mounts()  # whatever an earlier killed harness left
    assert reap_mounts() == 0
    work = orphaned_cap(tmp_path)
    assert reap_mounts() == 1 and not os.path.ismount(work)


def test_an_entry_that_cannot_be_copied_back_does_not_stop_the_others(tmp_path, monkeypatch):
    """Changed: ``continue`` -> ``break`` after an OSError in ``local._sync`` (now ``workdir._sync``): one entry
    that cannot be copied (a path too long, say) must not leave its siblings out of the write-back."""
    from sao_env.sandbox import workdir

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for name in "abcdef":
        (src / name).write_text(name * 3)
    copy = workdir._copy_entry
    failed: list[str] = []

    def first_fails(source, target, info, owner):
        if not failed:
            failed.append(os.path.basename(target))
            raise OSError(36, "File name too long")
        copy(source, target, info, owner)

    monkeypatch.setattr(workdir, "_copy_entry", first_fails)
    workdir._sync(str(src), str(dst), {}, None)
    assert sorted(p.name for p in dst.iterdir()) == sorted(set("abcdef") - set(failed))
    assert all((dst / n).read_text() == n * 3 for n in set("abcdef") - set(failed))


def test_the_warm_start_progress_bar_advances_one_step_per_step(monkeypatch):
    """Changed: ``progress.update(bar, advance=1, ...)`` -> ``advance=2`` in ``warmstart._train``."""
    from sao_env.policy import warmstart

    advanced: list[float] = []
    totals: list[float] = []

    class Recording:
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def add_task(self, description, total):
            totals.append(total)
            return 0

        def update(self, task, advance=0, **k):
            advanced.append(advance)

    monkeypatch.setattr(warmstart, "Progress", Recording)
    from sao_env.experiment import resolve_config
    from sao_env.policy.model import build_policy, build_tokenizer
    from sao_env.scenario import Scenario

    config = resolve_config("style-drift", "sao", 0, ["env.warm_start.steps=3", "env.warm_start.batch_size=2"])
    tokenizer = build_tokenizer(config.agent.model)
    model = build_policy(config.agent.model, tokenizer)
    scenario = Scenario(config.env)
    losses = warmstart.supervised_warm_start(model, tokenizer, scenario, config.env.warm_start, show_progress=False)
    assert len(losses) == 3
    assert totals == [3] and sum(advanced) == 3 == len(advanced)


def test_a_frozen_pattern_is_refused_only_when_nothing_is_frozen():
    """Changed: ``and not self.critic_freeze_attention`` -> ``and self.critic_freeze_attention`` in
    ``SAOConfig``'s check: a pattern for the frozen modules makes sense only while they are frozen."""
    from pydantic import ValidationError

    from sao_env.agents.configs import SAOConfig

    assert SAOConfig(critic_frozen_pattern=r"\.attn$").critic_frozen_pattern == r"\.attn$"
    assert SAOConfig(critic_freeze_attention=False).critic_frozen_pattern is None
    with pytest.raises(ValidationError, match="critic_frozen_pattern is set but critic_freeze_attention is false"):
        SAOConfig(critic_frozen_pattern=r"\.attn$", critic_freeze_attention=False)


def test_the_matrix_group_heads_link_boards_to_the_summary_and_maps_to_their_section(found):
    """Changed: ``p.anchor if p.board is None else "#summary"`` -> ``is not None`` in ``finding.matrix_html``."""
    from sao_env.leaderboard.finding import matrix_html

    expected = []
    for p in found:
        href = "#summary" if p.board is not None else f"#{p.anchor.lstrip('#')}"
        if (p.group, href) not in expected:
            expected.append((p.group, href))
    assert any(g == "boards" for g, _ in expected) and len(expected) > 1
    heads = re.findall(r'<th class="group" colspan="\d+" scope="colgroup"><a href="([^"]+)">', matrix_html(found))
    assert heads == [href for _, href in expected]


def test_only_the_completions_api_renders_prompts_with_a_template(monkeypatch, tmp_path):
    """Changed: ``backend_options.get("api") == "completions"`` -> ``!=`` in ``runner.run_eval``: the chat API
    sends messages (the server applies its template), so no prompt template is made or passed for it."""
    from sao_env.benchmarks import backends
    from sao_env.benchmarks.runner import run_eval

    if not (REPO.parent / "shared" / "data").is_dir():
        pytest.skip("benchmark rows not found in ../shared/data")
    seen: list[dict] = []

    class Stop(Exception):
        pass

    def record(name, model, **options):
        seen.append({"name": name, "model": model, **options})
        raise Stop

    monkeypatch.setattr(backends, "make_backend", record)
    for api, template in (("chat", "auto"), ("completions", "none")):
        with pytest.raises(Stop):
            run_eval("served-name", ["hmmt_feb_2025"], data=str(REPO.parent / "shared" / "data"), backend="openai",
                     out=tmp_path / api,
                     backend_options={"base_url": "http://127.0.0.1:9/v1", "api": api, "prompt_template": template})
    assert [(s["name"], s["model"], s["api"]) for s in seen] == [("openai", "served-name", "chat"),
                                                                ("openai", "served-name", "completions")]
    assert "prompt_template" not in seen[0]
    assert seen[1]["prompt_template"] is None


def test_grader_serve_needs_the_llm_grader_and_the_llm_grader_may_serve():
    """Changed: ``grader_serve and grader != "llm"`` -> ``== "llm"`` in the eval command's options."""
    from sao_env.cli.benchmarks import _options
    from sao_env.errors import UserError

    common = dict(k=1, limit=1, max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0, grader_model=None,
                  grader_base_url=None, grader_api_key=None, grading_timeout=10, leaderboard=None, progress=False)
    with pytest.raises(UserError, match=r"^--grader-serve serves a judge model: it needs --grader llm$"):
        _options(grader="math", grader_serve=True, servers=[], **common)
    os.environ.pop("SAO_ENV_GRADER_MODEL", None)
    with pytest.raises(UserError, match=r"^--grader-serve needs the judge model to serve: pass --grader-model NAME$"):
        _options(grader="llm", grader_serve=True, servers=[], **common)


def test_the_eval_limits_hold_at_their_boundaries():
    """Changed: ``max_new_tokens > MAX_NEW_TOKENS`` -> ``>=`` and a deadline's ``value <= 0`` -> ``< 0`` in the
    eval command's checks: the cap itself is allowed, a deadline of exactly 0 is not."""
    from sao_env.cli.benchmarks import MAX_NEW_TOKENS, _check_limits, _options
    from sao_env.errors import UserError

    assert MAX_NEW_TOKENS == 131072
    common = dict(k=1, limit=1, temperature=0.0, top_p=1.0, seed=0, grader="math", grader_model=None,
                  grader_base_url=None, grader_api_key=None, grading_timeout=10, leaderboard=None, progress=False)
    assert _options(max_new_tokens=131072, servers=[], **common).max_new_tokens == 131072
    with pytest.raises(UserError, match=r"^--max-new-tokens must be at most 131,072$"):
        _options(max_new_tokens=131073, servers=[], **common)
    for flag, args in (("--request-deadline", (None, 0)), ("--grader-deadline", (None, None, 0))):
        with pytest.raises(UserError, match=rf"^{flag} must be greater than 0$"):
            _check_limits(*args)
    _check_limits(None, 0.001, 0.001)
