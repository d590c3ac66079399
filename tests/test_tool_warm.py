"""Warm interpreters: a forked call answers what a fresh interpreter answers, calls never see each
other, a call cannot take the server down for good, and remembered tool outputs are exact."""

from __future__ import annotations

import os
import threading

import pytest

from sao_env.sandbox import LocalExecutor, default_executor, warm
from sao_env.tasks import tool_math
from sao_env.tasks.forge import BUG_KINDS, ForgeSource
from sao_env.tasks.forge.grading import PYTEST_ARGS, PYTEST_ENV, apply_patch, run_pytest, summarize
from sao_env.tasks.tool_math import TOOL_LIMITS, run_tool_call, tool_executor

needs_bwrap = pytest.mark.skipif(not warm.available(tool_executor()),
                                 reason="warm interpreters need the bubblewrap sandbox")

CALLS = [
    "print(mul(123, 456))",
    "print(times(2, 3))",
    "print(mul([2, 3]))",
    "print(1 +",
    "x = bytearray(10 ** 10)",
    "import os; os.kill(os.getpid(), 9)",
    "import sys; sys.exit(3)",
    "import sys; sys.exit('bye')",
    "print({'alpha', 'beta', 'gamma', 'delta'})",
    "import sys; print(sys.argv, __name__, len(sys.path) > 0, 'tools' in sys.modules)",
    "import os; print(sorted(os.listdir('.')), os.environ['HOME'] == os.getcwd())",
    "print(input())",
    "print('x' * 100000)",
    "def f():\n    return g()\nprint(f())",
    "raise ValueError('custom')",
]


@pytest.fixture
def interpreter():
    source = tool_math.TOOL_APIS["v1"].module_source()
    interp = warm.WarmInterpreter(tool_executor(), preload=["tools"], library={"tools.py": source},
                                  env=tool_math.TOOL_ENV)
    yield interp
    interp.close()


def call(interp: warm.WarmInterpreter, code: str, timeout_s: float = 2.0):
    files = {"tools.py": tool_math.TOOL_APIS["v1"].module_source(), "snippet.py": tool_math.PREAMBLE + code}
    return interp.run(["snippet.py"], files, timeout_s=timeout_s, env=tool_math.TOOL_ENV)


@needs_bwrap
@pytest.mark.parametrize("api", sorted(tool_math.TOOL_APIS))
def test_warm_calls_answer_exactly_what_a_fresh_interpreter_answers(api):
    tool_math.clear_tool_cache()
    for code in CALLS:
        cold = tool_math.execute_tool_call(api, code, timeout_s=2.0, executor=tool_executor())
        hot = tool_math.execute_tool_call(api, code, timeout_s=2.0)
        assert (hot.returncode, hot.stdout, hot.timed_out, hot.reason, hot.truncated) == \
               (cold.returncode, cold.stdout, cold.timed_out, cold.reason, cold.truncated), code
        assert hot.stderr.splitlines()[-1:] == cold.stderr.splitlines()[-1:], code
        assert run_tool_call(api, code) == run_tool_call(api, code, executor=tool_executor()), code


@needs_bwrap
def test_a_call_leaves_nothing_behind_for_the_next(interpreter):
    planted = call(interpreter, "\n".join([
        "import os, subprocess, tools",
        "open('/tmp/planted', 'w').write('x')",
        "open('/dev/shm/planted', 'w').write('x')",
        "open('planted.txt', 'w').write('x')",
        "tools.mul = lambda a, b: -1",
        "subprocess.Popen(['sleep', '60'], start_new_session=True)",
        "print('planted')",
    ]))
    assert planted.stdout == "planted\n" and planted.returncode == 0
    after = call(interpreter, "\n".join([
        "import os",
        "print(os.listdir('/tmp'), os.listdir('/dev/shm'), sorted(os.listdir('.')))",
        "print(mul(6, 7))",
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == sorted([1, os.getppid(), os.getpid()]))",
    ]))
    lines = after.stdout.splitlines()
    assert lines[0].startswith("[") and "planted" not in lines[0]
    assert lines[0].endswith("['snippet.py', 'tools.py']")
    assert lines[1:] == ["42", "True"]
    assert interpreter.starts == 1


@needs_bwrap
def test_the_server_cannot_be_traced_or_read_by_a_call(interpreter):
    result = call(interpreter, "\n".join([
        "import os",
        "for path in (f'/proc/{os.getppid()}/mem', f'/proc/{os.getppid()}/environ', f'/proc/{os.getppid()}/fd/0'):",
        "    try:",
        "        open(path, 'rb').read(1)",
        "        print('read', path)",
        "    except OSError as exc:",
        "        print(type(exc).__name__)",
    ]))
    assert result.stdout.splitlines() == ["PermissionError"] * 3


@needs_bwrap
def test_killing_the_server_loses_one_call_and_the_next_gets_a_new_server(interpreter):
    assert call(interpreter, "print(1)").stdout == "1\n"
    lost = call(interpreter, "import os, signal; os.kill(os.getppid(), signal.SIGKILL)")
    assert lost.returncode is None and lost.reason == warm.LOST and not lost.timed_out
    assert call(interpreter, "print(mul(2, 5))").stdout == "10\n"
    assert interpreter.starts == 2


@needs_bwrap
def test_a_server_that_never_started_stops_the_caller_and_a_later_failed_start_is_the_calls_reason(
        interpreter, monkeypatch, tmp_path):
    """No server yet: the sandbox is broken, not the call, so it raises (a run stops with one line) instead of
    answering the model with the setup error; after one start, a failed restart is that call's reason."""
    missing = tmp_path / "gone" / "python"
    monkeypatch.setattr(LocalExecutor, "python", str(missing))
    with pytest.raises(warm.SandboxBroken, match=f"prlimit: failed to execute {missing}: No such file or directory"):
        call(interpreter, "print(1)")
    assert interpreter.starts == 0
    monkeypatch.undo()
    assert call(interpreter, "print(mul(2, 4))").stdout == "8\n" and interpreter.starts == 1
    interpreter.close()
    monkeypatch.setattr(LocalExecutor, "python", str(missing))
    failed = call(interpreter, "print(1)")
    assert failed.returncode is None and failed.reason.startswith(f"sandbox setup failed: prlimit: failed to execute {missing}")


DOTDOT = """import sys
from sao_env.tasks.tool_math import run_tool_call
assert "/../" in sys.executable, sys.executable
print(run_tool_call("v1", "print(add(20, 22))"))
"""


@needs_bwrap
def test_an_interpreter_started_by_a_path_through_dotdot_runs_tool_calls(tmp_path):
    """Python keeps the path it was started by: ``elsewhere/../.venv/bin/python`` names a folder that the
    sandbox does not have (``elsewhere``), and every call failed setting up. The sandbox runs the venv's
    interpreter from its folder's real path."""
    import subprocess
    import sys

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    started_by = os.path.join("..", os.path.relpath(sys.executable, tmp_path))
    done = subprocess.run([started_by, "-c", DOTDOT], cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "42\n"


@needs_bwrap
def test_timeouts_and_fork_bombs_end_with_the_call(interpreter):
    hung = call(interpreter, "while True: pass", timeout_s=0.5)
    assert hung.timed_out and hung.reason == "timeout" and hung.returncode is None
    bomb = call(interpreter, "import os\nwhile True:\n    os.fork()", timeout_s=3.0)
    assert bomb.returncode != 0 or bomb.timed_out
    assert call(interpreter, "print(mul(3, 3))").stdout == "9\n"
    assert interpreter.starts == 1


@needs_bwrap
def test_outputs_are_remembered_but_timeouts_are_not(monkeypatch):
    tool_math.clear_tool_cache()
    runs = []
    real = tool_math.execute_tool_call

    def counting(api, code, **kw):
        runs.append(code)
        return real(api, code, **kw)

    monkeypatch.setattr(tool_math, "execute_tool_call", counting)
    first = run_tool_call("v2", "print(mul(12, 34))")
    assert first == "NameError: name 'mul' is not defined"
    assert run_tool_call("v2", "print(mul(12, 34))", max_output_chars=10) == first[:10] + f"...[{len(first) - 10} more]"
    assert run_tool_call("v1", "print(mul(12, 34))") == "408"  # the API version is part of the key
    assert len(runs) == 2
    for _ in range(2):
        assert "timeout" in run_tool_call("v1", "while True: pass", timeout_s=0.25)
    assert len(runs) == 4
    run_tool_call("v2", "print(mul(12, 34))", executor=tool_executor())  # an explicit executor always runs
    assert len(runs) == 5


@needs_bwrap
def test_concurrent_callers_get_their_own_servers_and_the_same_answers():
    tool_math.clear_tool_cache()
    codes = [f"print(mul({a}, {a + 1}))" for a in range(100, 124)]
    results: dict[str, str] = {}

    def work(chunk):
        for code in chunk:
            results[code] = tool_math.describe_result(tool_math.execute_tool_call("v1", code, timeout_s=2.0), 2.0)

    threads = [threading.Thread(target=work, args=(codes[k::3],)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {f"print(mul({a}, {a + 1}))": str(a * (a + 1)) for a in range(100, 124)}


def test_without_bubblewrap_calls_run_cold():
    fallback = LocalExecutor(TOOL_LIMITS, use_bwrap=False)
    assert not warm.available(fallback)
    with pytest.raises(RuntimeError, match="bubblewrap"):
        warm.WarmInterpreter(fallback)
    assert run_tool_call("v3", "print(add([20, 22]))", executor=fallback) == "result=42"


def test_secrets_are_refused_before_anything_starts():
    if not warm.available(tool_executor()):
        pytest.skip("warm interpreters need the bubblewrap sandbox")
    with pytest.raises(ValueError, match="secret"):
        warm.WarmInterpreter(tool_executor(), env={"OPENAI_API_KEY": "x"})


@pytest.mark.slow
@needs_bwrap
def test_warm_pytest_runs_give_the_same_observations_and_statuses_as_cold_ones():
    from sao_env.tasks.forge.grading import _statuses

    for k in range(4):
        task = ForgeSource(ForgeSource.Params(repo_seed=k % 2, head=k, bug_kinds=[BUG_KINDS[k]])).task(k)
        ref = task.reference
        fixed = dict(ref["files"])
        lines = fixed[ref["bug"]["path"]].splitlines()
        lines[ref["bug"]["line"] - 1] = ref["bug"]["fixed"]
        fixed[ref["bug"]["path"]] = "\n".join(lines) + "\n"
        for tree in (dict(ref["files"]), fixed):
            patched, error = apply_patch(tree, ref["test_patch"])
            assert patched is not None, error
            for files, targets in ((tree, ["tests"]), (patched, sorted({t.split("::")[0] for t in ref["FAIL_TO_PASS"]}))):
                hot = run_pytest(files, targets, timeout_s=30)
                cold = run_pytest(files, targets, timeout_s=30, executor=default_executor())
                assert hot.returncode == cold.returncode and not hot.timed_out
                assert summarize(hot, 30) == summarize(cold, 30)
                assert _statuses(hot.stdout) == _statuses(cold.stdout) and _statuses(hot.stdout)


@needs_bwrap
def test_warm_pytest_sees_only_its_own_tree():
    interp = warm.WarmInterpreter(default_executor(), flags=(), preload=["pytest"], env=PYTEST_ENV)
    try:
        first = interp.run(["-m", "pytest", *PYTEST_ARGS], {"test_a.py": "def test_a():\n    assert True\n"},
                           timeout_s=30, env=PYTEST_ENV)
        second = interp.run(["-m", "pytest", *PYTEST_ARGS], {"test_b.py": "def test_b():\n    assert False\n"},
                            timeout_s=30, env=PYTEST_ENV)
    finally:
        interp.close()
    assert first.returncode == 0 and "PASSED test_a.py::test_a" in first.stdout
    assert second.returncode == 1 and "FAILED test_b.py::test_b" in second.stdout and "test_a" not in second.stdout


@needs_bwrap
def test_a_forked_harness_starts_its_own_server_and_leaves_the_parents_alone(interpreter):
    import os

    assert call(interpreter, "print(1)").stdout == "1\n"
    assert run_tool_call("v1", "print(mul(7, 8))", timeout_s=1.5) == "56"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child answers through the pipe and never returns into pytest
        try:
            text = call(interpreter, "print(mul(4, 5))").stdout + run_tool_call("v1", "print(mul(9, 9))", timeout_s=1.7)
            os.write(write, f"{text}|{interpreter.starts}".encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1000).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == "20\n81|2"
    assert call(interpreter, "print(mul(5, 5))").stdout == "25\n" and interpreter.starts == 1


@needs_bwrap
def test_a_pool_workers_run_stops_its_sandbox_servers_and_removes_their_folders(monkeypatch):
    """A pool's worker ends with ``os._exit`` (no ``atexit``): the run's servers go when the run ends, not with
    the process, else each worker of a ``--jobs 2`` grid left its servers' folders in /tmp."""
    from sao_env.experiment import drivers

    def a_run_that_calls_the_tool(plan, **options):
        assert run_tool_call("v1", "print(mul(6, 7))") == "42"
        return {"online_reward": 1.0}, 0.0

    tool_math.clear_tool_cache()
    monkeypatch.setattr(drivers, "run_plan", a_run_that_calls_the_tool)
    monkeypatch.setattr(drivers, "_STOP", None)
    with monkeypatch.context() as patch:
        patch.setattr(drivers.signal, "signal", lambda *args: None)  # this process's handlers stay as they are
        assert drivers._run_in_worker(None) == ({"online_reward": 1.0}, 0.0)
    assert not warm._pools
    tool_math.clear_tool_cache()
    pool = tool_math._warm_pool("v1")
    assert run_tool_call("v1", "print(mul(2, 3))") == "6"
    interpreters = list(pool._all)
    folders = [folder for i in interpreters for folder in (i._lib, i._run)]
    assert folders and all(f.is_dir() for f in folders)
    drivers.close_sandboxes()
    assert not any(f.exists() for f in folders) and not any(i.alive for i in interpreters)
