"""Run directories keyed by their configuration: the hash, the label, reuse only of finished runs of
the same configuration and code, summary.json removed at start and written last, disk faults."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import SHRINK, shrink_overrides
from sao_env import experiment
from sao_env.cli import main
from sao_env.errors import UserError
from sao_env.experiment import expand_config, load_run_config, plan_run, reuse_check, write_atomic
from sao_env.provenance import code_version


def _one_error(capsys, argv) -> str:
    """Exit code 2 and one error line, the last on stderr (progress bars of the run may precede it)."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("sao-env: error: "), err
    assert err.rstrip().endswith(errors[0]) and "Traceback" not in out + err
    return errors[0]


# -- the configuration's hash and the directory label ----------------------------------------------


def test_hash_is_sha256_of_the_canonical_expanded_config():
    plan = plan_run("style-drift", "sao", 0)
    expanded = expand_config(plan.config)
    text = json.dumps(expanded, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert plan.config_hash == hashlib.sha256(text.encode()).hexdigest()
    # Every default is written out: the algorithm's (agents/sao.yaml lists no adam_eps) and each source's.
    assert expanded["agent"]["hparams"]["adam_eps"] == 1e-5 and "reward_norm" in expanded["agent"]["hparams"]
    assert "digits" in expanded["env"]["phases"][0]["sources"][0]["params"]
    assert expanded["agent"]["runtime"]["on_full"] == "block"


def test_labels_follow_the_resolved_configuration_not_the_override_text(tmp_path):
    base = plan_run("style-drift", "sao", 0, runs_dir=tmp_path)
    assert base.label == "sao" and base.out == tmp_path / "style-drift" / "sao" / "seed0"
    # Restating the recipe's own value is the recipe: same label, same hash.
    same = plan_run("style-drift", "sao", 0, ["agent.hparams.lr=1e-4", "agent.runtime.on_full=block"], runs_dir=tmp_path)
    assert (same.label, same.config_hash, same.out) == (base.label, base.config_hash, base.out)
    lr = plan_run("style-drift", "sao", 0, ["agent.hparams.lr=3e-5"], runs_dir=tmp_path)
    assert lr.label.startswith("sao+") and len(lr.label) == len("sao+") + 8
    assert lr.config_hash != base.config_hash and lr.out == tmp_path / "style-drift" / lr.label / "seed0"
    # Seeds of one configuration share the label; their hashes differ (the seed is part of the configuration).
    lr1 = plan_run("style-drift", "sao", 1, ["agent.hparams.lr=3e-5"], runs_dir=tmp_path)
    assert lr1.label == lr.label and lr1.config_hash != lr.config_hash and lr1.out.name == "seed1"
    # The order of the overrides does not matter; another value is another label.
    a = plan_run("style-drift", "sao", 0, ["agent.hparams.lr=3e-5", "env.max_new_tokens=20"])
    b = plan_run("style-drift", "sao", 0, ["env.max_new_tokens=20", "agent.hparams.lr=3e-5"])
    assert (a.label, a.config_hash) == (b.label, b.config_hash) and a.label != lr.label
    assert plan_run("style-drift", "grpo", 0, ["agent.hparams.lr=3e-5"]).label.startswith("grpo+")


def test_run_dry_run_names_the_hash_and_directory(capsys):
    assert main(["run", "--dry-run", "agent.hparams.lr=3e-5"]) == 0
    out = capsys.readouterr().out
    plan = plan_run("style-drift", "sao", 0, ["agent.hparams.lr=3e-5"])
    assert f"# config_hash: {plan.config_hash}" in out and f"# run directory: {plan.out}" in out
    import yaml

    assert yaml.safe_load(out) == expand_config(plan.config)


# -- reuse -----------------------------------------------------------------------------------------


def _rows(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def _dry(capsys, argv) -> dict[str, tuple[str, str]]:
    assert main(["compare", "--dry-run", *argv]) == 0
    out = capsys.readouterr().out
    plan = {}
    for line in out.splitlines():
        action, path, why = line.split(None, 2)
        if action not in ("write", "merge"):  # the board folder and files, not a run
            plan[path] = (action, why)
    return plan


@pytest.mark.slow
def test_compare_reuses_only_finished_runs_of_the_same_configuration_and_code(capsys, tmp_path):
    runs, boards = tmp_path / "runs", tmp_path / "boards"
    common = ["--agents", "sao", "--seeds", "0", "--runs-dir", str(runs), "--leaderboard-dir", str(boards), "--jobs", "1"]
    shrink = shrink_overrides("sao")
    first = plan_run("style-drift", "sao", 0, shrink, runs_dir=runs)
    assert _dry(capsys, [*common, *shrink]) == {str(first.out): ("run", "new")}

    assert main(["compare", *common, *shrink]) == 0
    capsys.readouterr()
    summary = json.loads((first.out / "summary.json").read_text())
    assert summary["agent"] == first.label and summary["provenance"]["config_hash"] == first.config_hash
    action, why = _dry(capsys, [*common, *shrink])[str(first.out)]
    assert action == "reuse" and first.config_hash[:12] in why

    # A changed override is a new configuration: a new directory, a new run, the leaderboard shows it.
    changed = plan_run("style-drift", "sao", 0, [*shrink, "agent.hparams.lr=3e-5"], runs_dir=runs)
    assert changed.out != first.out
    assert _dry(capsys, [*common, *shrink, "agent.hparams.lr=3e-5"]) == {str(changed.out): ("run", "new")}
    assert main(["compare", *common, *shrink, "agent.hparams.lr=3e-5"]) == 0
    capsys.readouterr()
    new = json.loads((changed.out / "summary.json").read_text())
    assert load_run_config(changed.out).agent.hparams["lr"] == 3e-5
    rows = {r["agent"]: r for r in _rows(boards / "style-drift.csv")}
    assert set(rows) == {first.label, changed.label}  # the earlier row stays: its run directory holds its run
    row = rows[changed.label]
    assert row["agent"] == changed.label
    assert float(row["online_reward"]) == pytest.approx(new["online_reward"], rel=1e-4)  # the table rounds

    # Recorded hash or code that differ from today's, or no summary, are reruns, each with its reason.
    code = code_version()
    path = first.out / "summary.json"
    original = path.read_text()
    for edit, reason in ((lambda p: p.update(config_hash="0" * 64), "configuration changed"),
                         (lambda p: p["code"].update(source_sha256="f" * 64), "code changed"),
                         (lambda p: p.pop("config_hash"), "no configuration hash")):
        data = json.loads(original)
        edit(data["provenance"])
        path.write_text(json.dumps(data))
        reuse, why = reuse_check(first, code)
        assert not reuse and why.startswith(reason), why
    path.write_text(original)
    assert reuse_check(first, code)[0]
    edited = {**code, "source_sha256": "d" * 64}  # an edit of the package or a spec
    assert not reuse_check(first, edited)[0]
    recommitted = {**code, "git_commit": "a" * 40, "dirty": True, "diff_sha256": "d" * 64}  # the same sources
    assert reuse_check(first, recommitted)[0]
    path.unlink()
    assert _dry(capsys, [*common, *shrink])[str(first.out)] == ("run", "unfinished (no summary.json)")
    assert _dry(capsys, [*common, "--no-skip-existing", *shrink, "agent.hparams.lr=3e-5"])[str(changed.out)][0] == "run"
    # The rerun that follows writes the summary again.
    assert main(["compare", *common, *shrink]) == 0
    capsys.readouterr()
    assert json.loads(path.read_text())["provenance"]["config_hash"] == first.config_hash


# -- summary.json: removed at start, written last and atomically ------------------------------------


def test_write_atomic_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    write_atomic(target, "old\n")
    assert target.read_text() == "old\n"

    def refuse(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(experiment.files.os, "replace", refuse)
    with pytest.raises(UserError, match=r"cannot write .*summary\.json: No space left on device"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temporary file left


def test_an_interrupted_rerun_leaves_no_summary(shrunk_config, tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"online_reward": 1.0}\n')
    calls = []

    def crash(*args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment.run, "evaluate_heldout", crash)
    with pytest.raises(KeyboardInterrupt):
        experiment.run_experiment(shrunk_config("running_mean"), out, show_progress=False)
    assert calls and not (out / "summary.json").exists()
    assert (out / "config.yaml").is_file()


# -- disk faults -----------------------------------------------------------------------------------


def test_a_full_disk_under_a_log_is_one_line_naming_it(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "evals.jsonl").symlink_to("/dev/full")  # every write there fails with ENOSPC
    line = _one_error(capsys, ["run", "--agent", "running_mean", "--out", str(out), *SHRINK])
    assert f"cannot write {out / 'evals.jsonl'}: No space left on device" in line
    assert not (out / "summary.json").exists()


@contextlib.contextmanager
def _tmpfs(path: Path, size: str, *options: str):
    """A tmpfs of ``size`` mounted on ``path`` (root only); the test is skipped where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)],
                           capture_output=True, check=False)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode().strip()[:100]}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_small_tmpfs_mid_run_is_one_line_naming_the_path(capsys, tmp_path):
    with _tmpfs(tmp_path / "small", "32k") as disk:
        out = disk / "run"
        line = _one_error(capsys, ["run", "--agent", "running_mean", "--out", str(out), *SHRINK])
        assert f"cannot write {out}/" in line and line.endswith("No space left on device"), line
        assert (out / "config.yaml").is_file() and (out / "metrics.jsonl").stat().st_size > 0  # it failed mid-run
        assert not (out / "summary.json").exists()


def test_an_unwritable_run_directory_is_one_line_naming_it(capsys, tmp_path):
    if os.geteuid() == 0:
        context = _tmpfs(tmp_path / "ro", "1m", "ro")
    else:
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o555)
        context = contextlib.nullcontext(tmp_path / "ro")
    with context as folder:
        line = _one_error(capsys, ["run", "--agent", "running_mean", "--out", str(folder / "run"), *SHRINK])
        assert f"cannot write {folder / 'run'}" in line
        assert "Read-only file system" in line or "Permission denied" in line


def test_a_directory_made_read_only_mid_run_is_one_line_and_leaves_no_summary(capsys, tmp_path, monkeypatch):
    if os.geteuid() == 0:
        context = _tmpfs(tmp_path / "disk", "16m")
    else:
        context = contextlib.nullcontext(tmp_path)
    with context as disk:
        out = disk / "run"
        out.mkdir()
        (out / "summary.json").write_text("{}\n")  # an older run's
        summarise = experiment.run.adaptation_summary

        def lock_then_summarise(*args, **kwargs):  # the logs are closed; the checkpoint and summary follow
            if os.geteuid() == 0:
                subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
            else:
                out.chmod(0o555)
            return summarise(*args, **kwargs)

        monkeypatch.setattr(experiment.run, "adaptation_summary", lock_then_summarise)
        try:
            line = _one_error(capsys, ["run", "--agent", "running_mean", "--out", str(out), *SHRINK])
        finally:
            if os.geteuid() != 0:
                out.chmod(0o755)
        assert f"cannot write {out}/" in line
        assert "Read-only file system" in line or "Permission denied" in line
        assert not (out / "summary.json").exists() and (out / "metrics.jsonl").stat().st_size > 0


def test_a_full_disk_at_the_final_policy_is_the_systems_words_like_every_other_write(monkeypatch, tmp_path):
    """safetensors reports a failed write as its own error type, naming the OS error at the end of its message: the
    line says what the system says, as a failed log or checkpoint write does."""
    from safetensors import SafetensorError

    from sao_env.experiment.run import save_final

    def full_disk(folder, *args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    agent = SimpleNamespace(policy=SimpleNamespace(save_pretrained=full_disk), tokenizer=None)
    final = tmp_path / "checkpoints" / "final"
    final.parent.mkdir()
    with pytest.raises(UserError) as err:
        save_final(agent, final)
    assert str(err.value) == f"cannot write {final.parent}/.final.tmp{os.getpid()}: No space left on device"
    assert list(final.parent.iterdir()) == []  # nothing half-written left behind
    other = SafetensorError("header too large")
    agent.policy.save_pretrained = lambda *a, **k: (_ for _ in ()).throw(other)
    with pytest.raises(UserError, match=r"\.final\.tmp\d+: header too large$"):
        save_final(agent, final)
