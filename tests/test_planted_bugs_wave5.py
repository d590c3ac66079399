"""Values that the 17 planted bugs of issue #50's fifth wave changed and the rest of the suite did not check.

Each test asserts values worked out by hand in its docstring or comments, never read from the code under
test, and was checked against the code with its bug planted (the test fails there) and without (it passes):

* ``verdicts`` judging by the raw p instead of Holm's (``p_holm <= alpha`` -> ``p <= alpha``):
  ``test_a_verdict_is_judged_by_holms_p_not_the_raw_p``;
* "seeds agreeing" counting a difference of exactly 0 (``d > 0`` -> ``d >= 0`` in ``Verdict.agreeing``):
  ``test_a_zero_difference_is_not_a_seed_agreeing``;
* the pairwise detectable difference's family counting the pairs not tested (``m`` = every pair):
  ``test_the_pairwise_detectable_difference_is_stated_over_the_pairs_tested``;
* the per-prompt tracker's ``window`` and ``global_window`` swapped:
  ``test_the_per_prompt_tracker_keeps_window_per_prompt_and_global_window_overall``;
* ``actor/baseline_keys`` not the number of distinct keys seen:
  ``test_baseline_keys_counts_the_distinct_keys_seen``;
* a NaN reward making the logged baseline non-finite: ``test_a_nan_reward_leaves_the_logged_baseline_finite``;
* the warm start loaded without its precision: ``test_a_cached_warm_start_is_loaded_in_its_precision``;
* the KV cache not bfloat16 under autocast: ``test_the_kv_cache_is_bfloat16_under_autocast``;
* the critic's recovery after a drift one update late: ``test_recovery_at_the_kth_update_after_the_drift``;
* ``parse_resources("GPU=0")`` refused: ``test_a_resource_of_zero_is_accepted``;
* ``unpack`` overwriting a finished run: ``test_unpack_leaves_a_finished_run_alone``;
* a Docker exit status of 128 reported as 0 (fake engine client; the real engine's case is in
  ``test_planted_bugs_wave5_docker.py``): ``test_docker_exit_128_is_not_reported_as_success``;
* the image builder copying ``..`` paths: ``test_the_image_builder_copies_no_path_outside_site_packages``;
* a bare KeyboardInterrupt forwarded to pool workers as SIGTERM: ``test_a_bare_ctrl_c_reaches_the_workers_as_sigint``;
* a benchmark score of exactly 0.5 not counted correct: ``test_a_score_of_one_half_counts_as_correct``;
* the hub's "cached as absent" marker passing the offline check:
  ``test_a_model_cached_as_absent_is_refused_offline``;
* a spec of exactly the size cap refused: ``test_a_spec_of_exactly_the_size_cap_is_read``.
"""

from __future__ import annotations

import math
import signal
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from scipy import stats as sps

from sao_env.errors import UserError
from sao_env.types import Episode, Task

# ----------------------------------------------------------------------------- predictions and stats


def _per_seed(values: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """A per-seed table as a grid writes it: one line per (cell, row, seed), seeds 0, 1, ..."""
    return pd.DataFrame([{"scenario": cell, "row": row, "seed": s, "online_reward": v}
                         for (cell, row), vs in values.items() for s, v in enumerate(vs)])


def _spec(*items: dict):
    from sao_env.leaderboard.predictions import Predictions

    return Predictions.model_validate({"title": "t", "predictions": list(items)})


def test_a_verdict_is_judged_by_holms_p_not_the_raw_p():
    """Three predictions, each + on all 6 seeds: the exact sign-flip p is 2 / 2^6 = 0.03125 each (only the
    all-+ and all-- patterns reach |sum|), below alpha 0.05; Holm over 3 makes each 3 x 0.03125 = 0.09375,
    above it: none resolved. Judged by the raw p all three would be held."""
    from sao_env.leaderboard.predictions import verdicts

    base = [0.50, 0.52, 0.48, 0.51, 0.49, 0.53]
    data = _per_seed({("x", "base"): base,
                      ("x", "a"): [b + 0.01 * (i + 1) for i, b in enumerate(base)],
                      ("x", "b"): [b + 0.02 * (i + 1) for i, b in enumerate(base)],
                      ("x", "c"): [b + 0.03 * (i + 1) for i, b in enumerate(base)]})
    found = verdicts(data, _spec(*({"id": r.upper(), "cell": "x", "contrast": f"{r} - base", "sign": ">"}
                                   for r in ("a", "b", "c"))))
    assert [v.p for v in found] == pytest.approx([0.03125] * 3)
    assert [v.p_holm for v in found] == pytest.approx([0.09375] * 3)
    assert [v.verdict for v in found] == ["not resolved"] * 3


def test_a_verdict_at_p_002_each_of_three_is_not_resolved(monkeypatch):
    """The issue's case as stated: three predictions at p = 0.02 each, Holm 3 x 0.02 = 0.06 > 0.05."""
    from sao_env.leaderboard import predictions, stats

    for module in (stats, predictions):  # wherever verdicts looks it up
        monkeypatch.setattr(module, "sign_flip_pvalue", lambda d, **kw: (0.02, "exact"), raising=False)
    data = _per_seed({("x", "base"): [0.0] * 4, ("x", "a"): [1.0] * 4})
    found = predictions.verdicts(data, _spec(*({"id": f"P{i}", "cell": "x", "contrast": "a - base", "sign": ">"}
                                               for i in range(3))))
    assert [v.p_holm for v in found] == pytest.approx([0.06] * 3)
    assert [v.verdict for v in found] == ["not resolved"] * 3


def test_a_zero_difference_is_not_a_seed_agreeing():
    """Differences a - base per seed: 0, +0.01, +0.02, -0.01, +0.03 (seed 0 equal, so exactly 0.0):
    predicted ">" agree at seeds 1, 2, 4 = 3 of 5; predicted "<" (base - a: 0, -, -, +, -) agree at 1, 2, 4
    as well, and at none where the difference is 0."""
    from sao_env.leaderboard.predictions import verdict_display, verdict_table, verdicts

    base = [0.5, 0.5, 0.5, 0.5, 0.5]
    a = [0.5, 0.51, 0.52, 0.49, 0.53]
    found = verdicts(_per_seed({("x", "base"): base, ("x", "a"): a}),
                     _spec({"id": "UP", "cell": "x", "contrast": "a - base", "sign": ">"},
                           {"id": "DOWN", "cell": "x", "contrast": "base - a", "sign": "<"}))
    assert found[0].diffs[0] == 0.0 and found[1].diffs[0] == 0.0
    assert [v.agreeing for v in found] == [3, 3]
    table = verdict_table(found)
    assert table["seeds_agreeing"].tolist() == [3, 3]
    _, body = verdict_display(table)
    assert [row[4] for row in body] == ["3 of 5", "3 of 5"]


def test_the_pairwise_detectable_difference_is_stated_over_the_pairs_tested():
    """Rows a, b share seeds 0-5; row c has only seed 9, so the pairs (a, c) and (b, c) are not tested
    (fewer than 2 shared seeds): the family is the 1 pair tested, the level alpha / 1 = 0.05, and the
    detectable difference (t_{0.975, 5} + t_{0.8, 5}) x sd / sqrt(6) = (2.571 + 0.920) x sd / 2.449.
    Counted over all 3 pairs the level would be 0.05 / 3 = 0.0167, which 6 seeds cannot reach (the
    smallest sign-flip p is 2 / 2^6 = 0.03125): inf. Holm over the one test leaves a's p (+ on all 6
    seeds: 2 / 64) as it is, so a beats b."""
    from sao_env.leaderboard.stats import pairwise

    diffs = [0.01, 0.03, 0.02, 0.05, 0.04, 0.06]  # a - b per seed
    values = {"a": {s: 0.5 + d for s, d in enumerate(diffs)}, "b": {s: 0.5 for s in range(6)}, "c": {9: 0.7}}
    ab, ac, bc = pairwise(values)
    assert (ab.a, ab.b, ab.n, ac.made, bc.made) == ("a", "b", 6, False, False)
    sd = float(pd.Series(diffs).std(ddof=1))  # 0.0187
    by_hand = (sps.t.ppf(1 - 0.05 / 2, 5) + sps.t.ppf(0.8, 5)) * sd / math.sqrt(6)
    assert ab.mde == pytest.approx(by_hand, rel=1e-9)
    assert ab.p == pytest.approx(2 / 64) and ab.p_holm == pytest.approx(2 / 64) and ab.winner == "a"


# ----------------------------------------------------------------------------- prompt-dependent baselines


def _keyed_episodes(tok, rows: list[tuple[str, float]]) -> list[Episode]:
    """Hand-made one-turn episodes of (prompt id, reward): 3 prompt tokens, 2 action tokens."""
    prompt = tuple(tok("1+1=?", add_special_tokens=False)["input_ids"][:3])
    action = tuple(tok("22", add_special_tokens=False)["input_ids"][:2])
    out = []
    for i, (key, reward) in enumerate(rows):
        task = Task(id=f"t{i}", prompt=f"{key}: 1+1=?", reference="2", grader="style",
                    metadata={"phase": "p", "prompt_id": key})
        out.append(Episode(task=task, tokens_T=prompt + action, action_mask_T=(False,) * 3 + (True,) * 2,
                           rollout_logp_T=(0.0,) * 3 + (-1.0,) * 2, version_T=(-1,) * 3 + (0,) * 2, reward=reward,
                           response="22", group_id=i, phase="p", sim_start=0.0, sim_end=1.0))
    return out


ROWS = [("A", 1.0), ("B", 0.0), ("A", 0.0), ("C", 1.0), ("A", 1.0), ("D", 0.0), ("A", 0.0), ("E", 1.0)]


def test_the_per_prompt_tracker_keeps_window_per_prompt_and_global_window_overall(tiny):
    """window 1 (rewards kept per prompt), global_window 4 (rewards in the fallback mean). By hand, the
    baseline before each reward ('seen' = the earlier rewards):
      A 1: unseen, global [] -> 0        B 0: unseen, global [1] -> 1
      A 0: A [1] -> 1                    C 1: unseen, global [1, 0, 0] -> 1/3
      A 1: A [0] (window 1) -> 0         D 0: unseen, global [0, 0, 1, 1] (last 4) -> 1/2
      A 0: A [1] -> 1                    E 1: unseen, global [0, 1, 1, 0] -> 1/2
    mean (0 + 1 + 1 + 1/3 + 0 + 1/2 + 1 + 1/2) / 8 = (13/3) / 8 = 13/24. Kept afterwards: A [0] (its last
    reward) and the last 4 rewards [1, 0, 0, 1]. Swapped (window 4, global_window 1), A's fifth
    baseline would be mean [1, 0] = 1/2 and the kept A history [1, 0, 1, 0]."""
    from sao_env.agents.prompt_baselines import PerPromptAgent

    policy, tok = tiny
    agent = PerPromptAgent(policy, tok, PerPromptAgent.config_cls(window=1, global_window=4, episodes_per_update=8))
    metrics = agent.update(_keyed_episodes(tok, ROWS))
    assert metrics["actor/baseline"] == pytest.approx(13 / 24, abs=1e-6)  # float32 rewards
    assert agent.history == {"A": [0.0], "B": [0.0], "C": [1.0], "D": [0.0], "E": [1.0]}
    assert agent.global_history == [1.0, 0.0, 0.0, 1.0]
    assert metrics["actor/baseline_fallback"] == pytest.approx(5 / 8)  # A's first, B, C, D, E


def test_baseline_keys_counts_the_distinct_keys_seen(tiny):
    """After ROWS (prompts A, B, C, D, E over 8 episodes, 4 kept globally): 5 keys. Then A, F, F, G
    (4 episodes, 3 distinct, 2 of them new): 7 keys seen in all. A class agent's task without a class
    (key None) adds no key: H, None, H, None -> 1."""
    from sao_env.agents.prompt_baselines import OracleClassAgent, PerPromptAgent

    policy, tok = tiny
    agent = PerPromptAgent(policy, tok, PerPromptAgent.config_cls(window=1, global_window=4, episodes_per_update=8))
    assert agent.update(_keyed_episodes(tok, ROWS))["actor/baseline_keys"] == 5.0
    more = _keyed_episodes(tok, [("A", 1.0), ("F", 0.0), ("F", 1.0), ("G", 0.0)])
    assert agent.update(more)["actor/baseline_keys"] == 7.0
    oracle = OracleClassAgent(policy, tok, OracleClassAgent.config_cls(episodes_per_update=4))
    episodes = _keyed_episodes(tok, [("x", 1.0), ("y", 0.0), ("z", 1.0), ("w", 0.0)])
    classes = ["H", None, "H", None]
    episodes = [Episode(**{**e.__dict__, "task": Task(id=e.task.id, prompt=e.task.prompt, reference="2", grader="style",
                                                      metadata={"phase": "p"} | ({"difficulty_class": c} if c else {}))})
                for e, c in zip(episodes, classes)]
    assert oracle.update(episodes)["actor/baseline_keys"] == 1.0


def test_a_nan_reward_leaves_the_logged_baseline_finite(tiny):
    """Rewards 1, NaN, 0, 1 at four unseen prompts (each falls back to the global mean; NaN enters no
    history): baselines 0 (nothing seen), 1 ([1]), 1 ([1]; the NaN left out), 1/2 ([1, 0]). The logged
    baseline is the mean over the 3 finite rewards: (0 + 1 + 1/2) / 3 = 1/2."""
    from sao_env.agents.prompt_baselines import PerPromptAgent

    policy, tok = tiny
    agent = PerPromptAgent(policy, tok, PerPromptAgent.config_cls(episodes_per_update=4))
    metrics = agent.update(_keyed_episodes(tok, [("P", 1.0), ("Q", math.nan), ("R", 0.0), ("S", 1.0)]))
    assert metrics["actor/baseline"] == pytest.approx(0.5, abs=1e-6)
    assert agent.global_history == [1.0, 0.0, 1.0]


# ----------------------------------------------------------------------------- precision


def test_a_cached_warm_start_is_loaded_in_its_precision(tmp_path, monkeypatch):
    """A warm start cached at its key (written here: a freshly built tiny policy, no training) and read
    back with ``agent.model.precision=bf16_autocast`` comes back recorded as bf16_autocast (its passes then
    run under autocast) with float32 master weights; the same cache read for float32 records float32."""
    from sao_env.experiment import resolve_config
    from sao_env.policy.model import build_policy, build_tokenizer
    from sao_env.policy.placement import autocast, precision_of
    from sao_env.policy.warmstart import is_cached, load_warm_started, warm_start_path
    from sao_env.scenario import Scenario

    monkeypatch.setenv("SAO_ENV_CACHE", str(tmp_path / "cache"))
    config = resolve_config("style-drift", "running_mean", 0, ["agent.model.precision=bf16_autocast"])
    model_spec, scenario = config.agent.model, Scenario(config.env)
    assert model_spec.precision == "bf16_autocast"
    path = warm_start_path(model_spec, scenario)
    assert path is not None and str(path).startswith(str(tmp_path))
    tok = build_tokenizer(model_spec)
    build_policy(model_spec, tok, seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    assert is_cached(path)
    policy, _, where = load_warm_started(model_spec, scenario, show_progress=False)
    assert where == path
    assert precision_of(policy) == "bf16_autocast"
    assert isinstance(autocast(policy), torch.autocast)
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    plain, _, _ = load_warm_started(model_spec.model_copy(update={"precision": "float32"}), scenario,
                                    show_progress=False)
    assert precision_of(plain) == "float32"


def test_the_kv_cache_is_bfloat16_under_autocast(tiny, monkeypatch):
    """The sampler of a bf16_autocast policy allocates its key/value cache in bfloat16 (every layer's keys
    and values), a float32 policy in float32; the log-probabilities are float32 either way."""
    from sao_env.policy import lean
    from sao_env.policy.generate import sample
    from sao_env.policy.placement import place

    policy, tok = tiny
    caches = []
    original = lean.LeanDecoder.new_cache

    def spy(self, *args, **kwargs):
        cache = original(self, *args, **kwargs)
        caches.append(cache)
        return cache

    monkeypatch.setattr(lean.LeanDecoder, "new_cache", spy)
    prompt = tok("1+1=?", add_special_tokens=False)["input_ids"]
    kwargs = dict(max_new_tokens=3, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, row_keys=[1, 2])
    sample(policy, [prompt, prompt[:3]], **kwargs)
    place(policy, "cpu", "bf16_autocast")
    out = sample(policy, [prompt, prompt[:3]], **kwargs)
    assert len(caches) == 2
    assert {t.dtype for t in caches[0].keys + caches[0].values} == {torch.float32}
    assert {t.dtype for t in caches[1].keys + caches[1].values} == {torch.bfloat16}
    assert all(len(s.token_ids) >= 1 and all(math.isfinite(lp) for lp in s.logps) for s in out)


# ----------------------------------------------------------------------------- the critic's recovery


def test_recovery_at_the_kth_update_after_the_drift():
    """k = 3. Phase 1 runs [0, 100) s, phase 2 [100, 200) s. Updates before the drift at 10 ... 90 s log
    0.5 (pre-drift level 0.5); after it, at 110, 120, 130, 140 s, 0.6. The first window of 3 updates all
    after the drift ends at the 3rd (130 s) and its mean 0.6 >= 0.5: recovery 30 s = 30 / 3600 h (the
    4th update, 40 s, would be one late). A second drift whose updates (210, 220, 230, 240 s: 0.2, 0.9, 0.9,
    0.9) recover only at the 4th (mean (0.9 x 3) >= pre 0.6, while (0.2 + 0.9 + 0.9) / 3 = 0.667 >= 0.6
    too): recovery at the 3rd, 230 s -> 30 / 3600 h."""
    from sao_env.evaluation.critic_fit import ev_recovery

    key = "critic/explained_variance_prefit"
    windows = [SimpleNamespace(index=0, name="a", start_s=0.0, end_s=100.0),
               SimpleNamespace(index=1, name="b", start_s=100.0, end_s=200.0)]
    updates = [{"sim_time_s": float(t), key: 0.5} for t in range(10, 100, 10)]
    updates += [{"sim_time_s": float(t), key: 0.6} for t in (110, 120, 130, 140)]
    out = ev_recovery(updates, windows, k=3)
    assert out["ev_pre_drift/2_b"] == pytest.approx(0.5)
    assert out["ev_recovery_h/2_b"] == pytest.approx(30 / 3600, rel=1e-12)
    # k = 1: the first update after the drift already recovers (0.6 >= mean of [0.5]): 10 s.
    assert ev_recovery(updates, windows, k=1)["ev_recovery_h/2_b"] == pytest.approx(10 / 3600, rel=1e-12)
    # Only k - 1 = 2 updates after the drift: never recovered inside the phase (NaN), not the 2nd.
    assert math.isnan(ev_recovery(updates[:-2], windows, k=3)["ev_recovery_h/2_b"])


# ----------------------------------------------------------------------------- the cluster


def test_a_resource_of_zero_is_accepted():
    """``GPU=0`` reserves no GPU (a number >= 0): CPU 1 by default, GPU 0; ``CPU=0`` likewise; a negative
    amount is refused."""
    from sao_env.cluster import parse_resources

    assert parse_resources("GPU=0") == {"CPU": 1.0, "GPU": 0.0}
    assert parse_resources("CPU=0,GPU=0.5") == {"CPU": 0.0, "GPU": 0.5}
    with pytest.raises(UserError, match="NAME=AMOUNT"):
        parse_resources("GPU=-1")


def test_unpack_leaves_a_finished_run_alone(tmp_path):
    """A folder that already holds a finished run (summary.json) is not written over by a shipped one:
    unpack returns False and the folder's files are byte for byte what they were; an unfinished folder
    (no summary.json) is replaced by the shipped run."""
    from sao_env.cluster import pack, unpack

    shipped = tmp_path / "node" / "run"
    shipped.mkdir(parents=True)
    (shipped / "summary.json").write_text('{"from": "node"}')
    (shipped / "metrics.jsonl").write_text("node\n")
    data = pack(shipped)

    finished = tmp_path / "here" / "finished"
    finished.mkdir(parents=True)
    (finished / "summary.json").write_text('{"from": "here"}')
    (finished / "own.txt").write_text("mine")
    lines = []
    assert unpack(data, finished, lines.append) is False
    assert {p.name: p.read_text() for p in finished.iterdir()} == {"summary.json": '{"from": "here"}',
                                                                  "own.txt": "mine"}
    assert lines == []
    assert sorted(p.name for p in finished.parent.iterdir()) == ["finished"]  # no staging folder left

    unfinished = tmp_path / "here" / "unfinished"
    unfinished.mkdir()
    (unfinished / "metrics.jsonl").write_text("partial\n")
    assert unpack(data, unfinished, lines.append) is True
    assert {p.name: p.read_text() for p in unfinished.iterdir()} == {"summary.json": '{"from": "node"}',
                                                                    "metrics.jsonl": "node\n"}
    assert len(lines) == 1 and "replacing the unfinished run" in lines[0]


def test_a_bare_ctrl_c_reaches_the_workers_as_sigint(monkeypatch):
    """``_stop_pool`` after a bare KeyboardInterrupt (a Ctrl-C: no ``signum``) sends SIGINT to every live
    worker; after ``cli.app.Stopped`` it sends the signal named (SIGTERM here); after any other failure
    SIGTERM."""
    from sao_env.experiment import drivers

    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(drivers.os, "kill", lambda pid, signum: sent.append((pid, signum)))

    def stop(err):
        sent.clear()
        pool = SimpleNamespace(_processes={1: SimpleNamespace(pid=4101), 2: SimpleNamespace(pid=4102)},
                               shutdown=lambda wait, cancel_futures: None)
        event = SimpleNamespace(set=lambda: None)
        drivers._stop_pool(pool, event, {}, err)
        return list(sent)

    assert stop(KeyboardInterrupt()) == [(4101, signal.SIGINT), (4102, signal.SIGINT)]
    named = KeyboardInterrupt()
    named.signum = signal.SIGTERM
    assert stop(named) == [(4101, signal.SIGTERM), (4102, signal.SIGTERM)]
    assert stop(RuntimeError("boom")) == [(4101, signal.SIGTERM), (4102, signal.SIGTERM)]


# ----------------------------------------------------------------------------- the sandbox


class _FakeContainer:
    def __init__(self, status: int):
        self.status, self.attrs, self.id = status, {"State": {"OOMKilled": False}}, "c0"

    def attach(self, **kwargs):
        return iter([(b"out\n", None)])

    def start(self):
        pass

    def wait(self, timeout):
        return {"StatusCode": self.status}

    def kill(self):
        pass

    def reload(self):
        pass

    def remove(self, force):
        pass


class _FakeClient:
    """Just enough of the docker SDK's client for ``DockerExecutor.run`` and ``exec_in``: every command
    exits with ``status``."""

    def __init__(self, status: int):
        self.status = status
        self.containers = SimpleNamespace(list=lambda **kwargs: [], create=lambda *a, **k: _FakeContainer(status))
        self.api = SimpleNamespace(base_url=f"fake-{id(self)}", exec_create=lambda *a, **k: {"Id": "e0"},
                                   exec_start=lambda *a, **k: iter([(b"out\n", None)]),
                                   exec_inspect=lambda exec_id: {"ExitCode": status})

    def ping(self):
        return True


def test_docker_exit_128_is_not_reported_as_success(tmp_path):
    """Docker's exit status N > 128 means killed by signal N - 128 (returncode -(N - 128)); exactly 128 is
    an ordinary exit status (``exit 128``): 128, not 0, and not a success. 137 -> -9 (SIGKILL), 1 -> 1.
    Both ``run`` (a fresh container) and ``exec_in`` (an existing one)."""
    pytest.importorskip("docker")
    from sao_env.sandbox.docker_exec import DockerExecutor

    for status, expected in ((128, 128), (137, -9), (129, -1), (1, 1), (0, 0)):
        executor = DockerExecutor("img", client=_FakeClient(status), user="1:1")
        ran = executor.run(["sh", "-c", f"exit {status}"], workdir=tmp_path, timeout_s=5)
        inside = executor.exec_in("c0", ["sh", "-c", f"exit {status}"], timeout_s=5)
        assert (ran.returncode, inside.returncode) == (expected, expected), status
        assert not ran.timed_out and ran.stdout == "out\n"
    assert DockerExecutor("img", client=_FakeClient(128), user="1:1").run(
        ["true"], workdir=tmp_path, timeout_s=5).returncode != 0


def test_the_image_builder_copies_no_path_outside_site_packages(tmp_path, monkeypatch):
    """A distribution's RECORD names files relative to site-packages; ``../../../bin/tool`` (a console
    script) lies outside it and ``pkg/__pycache__/m.pyc`` is a cache: of the four files only
    ``pkg/__init__.py`` and ``pkg/m.py`` are copied, each from where it lies."""
    import importlib.metadata

    from sao_env.sandbox import images

    site = tmp_path / "lib" / "python3" / "site-packages"
    files = ["pkg/__init__.py", "pkg/m.py", "pkg/__pycache__/m.pyc", "../../../bin/tool"]
    for rel in files:
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rel)
    assert (tmp_path / "bin" / "tool").is_file()
    dist = SimpleNamespace(files=[importlib.metadata.PackagePath(rel) for rel in files],
                           locate_file=lambda entry: site / str(entry))
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: dist)
    copied = images._python_files(("pkg",))
    assert [(str(source), rel) for source, rel in copied] == [(str(site / "pkg/__init__.py"), "pkg/__init__.py"),
                                                              (str(site / "pkg/m.py"), "pkg/m.py")]


# ----------------------------------------------------------------------------- benchmarks, hub, specs


def test_a_score_of_one_half_counts_as_correct():
    """A reward counts as correct at >= 0.5. Problem a: [0.5, 0.0] -> 1 correct of 2; b: [0.5, 0.5] -> 2 of 2;
    c: [0.49, 1.0] -> 1 of 2. accuracy (1/2 + 1 + 1/2) / 3 = 2/3; pass@2 = 1 for each (at least one
    correct): 1; pass@1 = avg@k = 2/3."""
    from sao_env.benchmarks.metrics import summarize_scores

    out = summarize_scores({"a": [0.5, 0.0], "b": [0.5, 0.5], "c": [0.49, 1.0]})
    assert out["accuracy"] == pytest.approx(2 / 3, abs=1e-12)
    assert out["pass_at_k"]["1"] == pytest.approx(2 / 3, abs=1e-12)
    assert out["pass_at_k"]["2"] == pytest.approx(1.0, abs=1e-12)
    assert (out["n"], out["problems"]) == (6, 3)
    assert summarize_scores({"x": [0.5]})["accuracy"] == 1.0


def test_a_model_cached_as_absent_is_refused_offline(tmp_path, monkeypatch):
    """Offline, a hub id whose config.json the cache records as absent (``.no_exist/<commit>/config.json``,
    what huggingface_hub writes after a 404) is not in the cache: a one-line UserError, as for an id the
    cache knows nothing of; an id whose snapshot holds config.json passes."""
    from huggingface_hub import constants

    from sao_env.hub import check_model

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    commit = "0" * 40
    gone = tmp_path / "models--org--gone"
    (gone / "refs").mkdir(parents=True)
    (gone / "refs" / "main").write_text(commit)
    (gone / ".no_exist" / commit).mkdir(parents=True)
    (gone / ".no_exist" / commit / "config.json").write_text("")
    here = tmp_path / "models--org--here"
    (here / "refs").mkdir(parents=True)
    (here / "refs" / "main").write_text(commit)
    (here / "snapshots" / commit).mkdir(parents=True)
    (here / "snapshots" / commit / "config.json").write_text("{}")

    check_model("org/here")
    with pytest.raises(UserError, match="'org/gone' is not in the local Hugging Face cache"):
        check_model("org/gone")
    with pytest.raises(UserError, match="'org/unknown' is not in the local Hugging Face cache"):
        check_model("org/unknown")


def test_a_spec_of_exactly_the_size_cap_is_read(tmp_path):
    """The cap is 1 MiB = 1,048,576 bytes: a spec of exactly that many bytes is read and parsed; one byte
    more is refused in one line."""
    from sao_env.specs import MAX_SPEC_BYTES, load_yaml, read_spec_text

    assert MAX_SPEC_BYTES == 1_048_576
    head = "name: at-the-cap\n#"
    exact = head + "x" * (1_048_576 - len(head) - 1) + "\n"
    assert len(exact.encode()) == 1_048_576
    path = tmp_path / "cap.yaml"
    path.write_text(exact)
    assert read_spec_text(path) == exact
    assert load_yaml(path) == {"name": "at-the-cap"}
    over = tmp_path / "over.yaml"
    over.write_text(exact + "#")
    with pytest.raises(UserError, match="larger than 1 MiB; refused"):
        read_spec_text(over)
