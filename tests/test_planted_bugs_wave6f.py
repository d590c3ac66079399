"""Wave 6, the fifth by-hand round (bench/mutants.py --planted, 30 slips planted by a helper who read only the
wave's diff): one test per survivor. Each names its change, fails with it and passes without it, and asserts values
worked out here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


def test_an_adam_beta_of_one_is_refused():
    """Changed: ``0 <= b < 1`` -> ``0 <= b <= 1`` in ``AgentConfig``'s betas check: beta 1 never forgets, and
    Adam's bias correction divides by 1 - beta^t = 0."""
    from sao_env.agents.configs import AgentConfig

    assert AgentConfig(adam_betas=(0.0, 0.999)).adam_betas == (0.0, 0.999)
    for betas in ((0.9, 1.0), (1.0, 0.999)):
        with pytest.raises(ValueError, match=r"Adam's betas must lie in \[0, 1\)"):
            AgentConfig(adam_betas=betas)


def test_the_value_at_the_prompt_ignores_lambda():
    """Changed: ``lam=1.0`` -> ``lam=cfg.lam`` in ``SAOAgent.advantages`` (value_at: prompt): the return from t is
    the undiscounted reward-to-go whatever lambda the config holds, so A_t = G_t - V(s_0) with G_t = 1 here."""
    from sao_env.agents.base import Batch
    from sao_env.agents.sao import SAOAgent, SAOConfig

    mask = torch.tensor([[0, 1, 1, 1]], dtype=torch.bool)
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    z = torch.zeros(mask.shape)
    batch = Batch(z.long(), mask.long(), mask, z, rewards, torch.tensor([1.0]), torch.zeros(1).long(), mask.sum(-1))
    values = torch.tensor([[9.0, 0.25, 0.5, 0.75]])
    for lam, adaptive in ((0.5, False), (0.95, True)):
        config = SAOConfig(value_at="prompt", lam=lam, adaptive_lambda=adaptive)
        adv = SAOAgent.advantages(SimpleNamespace(config=config), batch, values)
        assert torch.allclose(adv, torch.tensor([[0.0, 0.75, 0.75, 0.75]])), (lam, adaptive)


REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_the_completions_api_renders_prompts_with_the_served_models_own_template_by_default(monkeypatch, tmp_path):
    """Changed: ``prompt_template or "auto"`` -> ``or "none"`` in ``runner.run_eval``: with ``--api completions``
    and no template named, prompts go through the served model's own chat template (an instruct model given the
    raw prompt answers nothing), here a local folder's tokenizer whose template is written below."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from sao_env.benchmarks import backends
    from sao_env.benchmarks.runner import run_eval

    data = REPO.parent / "shared" / "data"
    if not data.is_dir():
        pytest.skip("benchmark rows not found in ../shared/data")
    folder = tmp_path / "instruct"
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")),
                                  unk_token="[UNK]")
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    tok.save_pretrained(folder)
    seen: list[dict] = []

    class Stop(Exception):
        pass

    def record(name, model, **options):
        seen.append(options)
        raise Stop

    monkeypatch.setattr(backends, "make_backend", record)
    with pytest.raises(Stop):
        run_eval(str(folder), ["hmmt_feb_2025"], data=str(data), backend="openai", out=tmp_path / "out",
                 backend_options={"base_url": "http://127.0.0.1:9/v1", "api": "completions"})
    template = seen[0]["prompt_template"]
    assert template is not None
    assert template.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False) == "<user>2+2?<assistant>"


def _signed_record(record: dict, seq: int, key: bytes) -> str:
    import hashlib
    import hmac
    import json

    from sao_env.tasks.forge import report

    body = json.dumps(dict(record, seq=seq, run="r1"), sort_keys=True, separators=(",", ":"))
    return f"{report.MARK} {body} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}"


def test_a_forge_instances_exit_status_is_the_logs_last_exit_line():
    """Changed: ``exits[-1]`` -> ``exits[0]`` in ``swebench._judge_forge_log``: the harness prints the exit line
    after pytest ends, so it is the log's last; an earlier one is text the graded code printed. A correct patch whose
    test output holds an exit-like line is still resolved, and a forged "exit 0" before a failing run changes
    nothing."""
    from sao_env.benchmarks.swebench import EXIT_LINE, _judge_forge_log
    from sao_env.tasks.forge import report

    key = report.process_key()
    spec = SimpleNamespace(FAIL_TO_PASS=["tests/test_a.py::test_a"], PASS_TO_PASS=[])

    def log(outcome: str, exitstatus: int, printed: int) -> str:
        phases = [{"kind": "report", "nodeid": "tests/test_a.py::test_a", "when": when, "outcome": outcome,
                   "xfail": False} for when in ("setup", "call", "teardown")]
        if outcome == "failed":
            phases[0]["outcome"] = phases[2]["outcome"] = "passed"
        finish = {"kind": "finish", "exitstatus": exitstatus, "failed": int(outcome == "failed"),
                  "testsfailed": int(outcome == "failed"), "collected": 1, "changes": []}
        records = [_signed_record(r, i, key) for i, r in enumerate([{"kind": "start", "pid": 1}, *phases, finish])]
        return "\n".join(["+ sao_grade tests/test_a.py", f"{EXIT_LINE}{printed}", *records, f"{EXIT_LINE}{exitstatus}"])

    details: dict = {}
    assert _judge_forge_log(spec, log("passed", 0, printed=1), details) is True
    assert details["reason"] == "resolved"
    details = {}
    assert _judge_forge_log(spec, log("failed", 1, printed=0), details) is False
    assert details["reason"] == "tests-failed"


def test_the_forge_reset_removes_ignored_files_outside_the_package(tmp_path):
    """Changed: ``git clean -fdqx`` -> ``git clean -fdq`` in ``swebench.forge_specs``: without ``-x`` a file that
    the repository's .gitignore matches (here a ``sitecustomize.py`` and a ``.pth`` file a patch wrote beside the
    package) survives the reset and runs inside the test process. The package's own files are the patch's to keep.
    The reset commands run here in bash on a real git repository."""
    import shutil
    import subprocess

    from sao_env.benchmarks.swebench import forge_specs

    if shutil.which("git") is None:
        pytest.skip("git not found")
    repo = tmp_path / "tally"
    (repo / "tally").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tally" / "__init__.py").write_text("X = 1\n")
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    assert True\n")
    (repo / ".gitignore").write_text("sitecustomize.py\n*.pth\n__pycache__/\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    # what a patch and its run leave: ignored and untracked files outside the package, an edited test, a package edit
    (repo / "sitecustomize.py").write_text("print('PASSED')\n")
    (repo / "tests" / "forge.pth").write_text("import os\n")
    (repo / "tests" / "conftest.py").write_text("collect_ignore = ['test_x.py']\n")
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (repo / "tally" / "__init__.py").write_text("X = 2\n")
    (repo / "tally" / "helper.pth").write_text("kept: inside the package\n")
    reset = [c for c in forge_specs("forge/tally")["eval_commands"] if c.startswith("git ")]
    assert len(reset) == 2
    subprocess.run(["bash", "-c", " && ".join(reset)], cwd=repo, check=True)
    assert not (repo / "sitecustomize.py").exists() and not (repo / "tests" / "forge.pth").exists()
    assert not (repo / "tests" / "conftest.py").exists()
    assert (repo / "tests" / "test_x.py").read_text() == "def test_x():\n    assert True\n"
    assert (repo / "tally" / "__init__.py").read_text() == "X = 2\n" and (repo / "tally" / "helper.pth").exists()


def test_the_eval_command_checks_each_judge_limit_under_its_own_flag():
    """Changed: ``_check_limits(http_retries, None, grader_deadline, max_reply_bytes)`` -> the last two swapped in
    the eval command's options: a judge deadline under a second is valid (it is not a byte count), a deadline of 0
    is refused by its own flag's name, and a reply cap of 0 bytes by its own."""
    from sao_env.cli.benchmarks import _options
    from sao_env.errors import UserError

    common = dict(k=1, limit=1, max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0, grader="math", grader_model=None,
                  grader_base_url=None, grader_api_key=None, grading_timeout=10, leaderboard=None, progress=False)
    assert _options(grader_deadline=0.5, max_reply_bytes=None, **common).k == 1
    assert _options(grader_deadline=None, max_reply_bytes=2, **common).k == 1
    with pytest.raises(UserError, match=r"^--grader-deadline must be greater than 0$"):
        _options(grader_deadline=0, max_reply_bytes=4096, **common)
    with pytest.raises(UserError, match=r"^--max-reply-bytes must be at least 1$"):
        _options(grader_deadline=30, max_reply_bytes=0, **common)
