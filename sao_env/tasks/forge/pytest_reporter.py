"""The grader's pytest plugin: reports each test's outcome on a channel the code under test cannot forge.

This file runs inside the sandbox, not in the harness: ``report.py`` writes it into the graded tree as
``_sao_grade_report.py`` (with the standard library and pytest only, it needs nothing of sao-env) and
pytest loads it with ``-p`` before it imports any test module, so before the package under test runs.
At import it

- reads the per-run key from ``.sao-grade-key`` and deletes the file (the package has not run yet);
- duplicates the real stderr (fd 2) before pytest's capture replaces it;
- records which callables decide a test's outcome (pytest's runner, reports and hook machinery,
  unittest's assertions, the import system) as they are before the package runs.

Every record it writes is one line ``@@sao-grade@@ <json> <mac>``, the mac an HMAC-SHA256 of the json
under the key, the json carrying a sequence number and a nonce of the run: ``start``, one ``report`` per test phase, ``collect``
per failed or skipped collector, and ``finish`` with pytest's exit status and every change it saw to the
recorded callables, to the registered hook implementations (a plugin or hook added by the package) and to
the import system. The harness (``report.judge``) accepts nothing else: printed ``PASSED`` lines, report
files and exit codes written by the package are not read as outcomes. docs/sandbox.md, "Grading that the
graded code cannot write", states what this covers and what it does not.
"""

import hashlib
import hmac
import json
import os
import sys

KEY_FILE = ".sao-grade-key"
MARK = "@@sao-grade@@"
_CRITICAL = (
    "_pytest.runner:call_and_report", "_pytest.runner:runtestprotocol",
    "_pytest.runner:pytest_runtest_call", "_pytest.runner:pytest_runtest_makereport",
    "_pytest.runner:pytest_runtest_protocol", "_pytest.runner:check_interactive_exception",
    "_pytest.runner:CallInfo.from_call", "_pytest.runner:SetupState.setup",
    "_pytest.python:Function.runtest", "_pytest.python:pytest_pyfunc_call", "_pytest.python:Function.setup",
    "_pytest.reports:TestReport.from_item_and_call", "_pytest.reports:TestReport.__init__",
    "_pytest.reports:BaseReport.passed", "_pytest.reports:BaseReport.failed", "_pytest.reports:BaseReport.skipped",
    "_pytest.main:pytest_runtestloop", "_pytest.main:Session.perform_collect", "_pytest.main:Session.genitems",
    "_pytest.main:wrap_session", "_pytest.main:Session.pytest_runtest_logreport",
    "_pytest.skipping:pytest_runtest_makereport", "_pytest.skipping:pytest_runtest_call",
    "_pytest.outcomes:fail", "_pytest.outcomes:skip", "_pytest.outcomes:xfail", "_pytest.outcomes:exit",
    "_pytest.assertion.rewrite:AssertionRewritingHook.exec_module",
    "_pytest.assertion.rewrite:AssertionRewritingHook.find_spec", "_pytest.assertion.rewrite:rewrite_asserts",
    "_pytest.unittest:TestCaseFunction.runtest",
    "pluggy._callers:_multicall", "pluggy._hooks:HookCaller.__call__", "pluggy._manager:PluginManager._hookexec",
    "unittest.case:TestCase.run", "unittest.case:TestCase.__call__", "unittest.case:TestCase.fail",
    "unittest.case:TestCase._callTestMethod",
    "builtins:AssertionError", "builtins:BaseException", "builtins:Exception",
    "os:_exit", "os:write",
)


def _resolve(spec):
    module_name, _, attribute = spec.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        __import__(module_name)
        module = sys.modules[module_name]
    owner, _, name = attribute.rpartition(".")
    holder = module
    for part in owner.split(".") if owner else ():
        holder = getattr(holder, part)
    if isinstance(holder, type):
        return holder.__dict__.get(name, getattr(holder, name, None))
    return getattr(holder, name, None)


def _callables():
    import unittest.case

    found = {}
    for spec in _CRITICAL:
        try:
            found[spec] = _resolve(spec)
        except (ImportError, AttributeError):
            found[spec] = None
    for name, value in vars(unittest.case.TestCase).items():
        if name.startswith("assert"):
            found["unittest.case:TestCase." + name] = value
    return found


def _hook_table(pluginmanager):
    table = {}
    for name in sorted(vars(pluginmanager.hook)):
        caller = getattr(pluginmanager.hook, name)
        if hasattr(caller, "get_hookimpls"):
            table[name] = tuple((impl.plugin_name, id(impl.function), bool(impl.hookwrapper), bool(impl.wrapper))
                                for impl in caller.get_hookimpls())
    return table


def _import_system():
    return (tuple(id(finder) for finder in sys.meta_path), tuple(id(hook) for hook in sys.path_hooks),
            id(sys.excepthook))


class _Reporter:
    """The hooks; the key lives only in this object's closure-held writer."""

    def __init__(self, write):
        self._write = write
        self._callables = _callables()
        self._pluginmanager = None
        self._hooks = None
        self._imports = None
        self._changes = []
        self._failed = 0

    def _check(self, where):
        now = _callables()
        for spec, before in self._callables.items():
            if now.get(spec) is not before:
                self._note(f"{spec} replaced ({where})")
        if self._hooks is not None and self._pluginmanager is not None:
            table = _hook_table(self._pluginmanager)
            for name in sorted(set(table) | set(self._hooks)):
                if table.get(name) != self._hooks.get(name):
                    self._note(f"hook {name} changed ({where})")
        if self._imports is not None and _import_system() != self._imports:
            self._note(f"import system changed ({where})")

    def _note(self, change):
        if change not in self._changes and len(self._changes) < 50:
            self._changes.append(change)

    def pytest_configure(self, config):
        self._pluginmanager = config.pluginmanager
        self._write({"kind": "start", "pid": os.getpid()})

    def pytest_collection(self, session):
        self._hooks = _hook_table(self._pluginmanager)
        self._imports = _import_system()
        self._check("collection")

    def pytest_collectreport(self, report):
        if not report.passed:
            self._failed += int(report.failed)
            self._write({"kind": "collect", "nodeid": report.nodeid, "outcome": report.outcome})

    def pytest_runtest_logreport(self, report):
        self._check(report.nodeid)
        self._failed += int(report.failed and not hasattr(report, "wasxfail"))
        self._write({"kind": "report", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                     "xfail": hasattr(report, "wasxfail")})

    def pytest_sessionfinish(self, session, exitstatus):
        self._check("finish")
        self._write({"kind": "finish", "exitstatus": int(exitstatus), "failed": self._failed,
                     "testsfailed": int(session.testsfailed), "collected": int(session.testscollected),
                     "changes": list(self._changes)})


def _writer(key, fd):
    counter = [0]
    raw_write = os.write
    run = os.urandom(16).hex()
    pid = os.getpid()

    def write(payload):
        if os.getpid() != pid:  # a process the tested code forked runs on in pytest's code: it reports nothing
            return
        payload = dict(payload, seq=counter[0], run=run)
        counter[0] += 1
        body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        line = f"\n{MARK} {body} {mac}\n".encode()
        while line:
            line = line[raw_write(fd, line):]

    return write


def _start():
    try:
        with open(KEY_FILE, "rb") as handle:
            key = handle.read()
        os.unlink(KEY_FILE)
    except OSError:
        return None
    if len(key) < 16:
        return None
    fd = os.dup(2)
    return _Reporter(_writer(key, fd))


_reporter = _start()


def pytest_configure(config):
    if _reporter is not None:
        config.pluginmanager.register(_reporter, "sao-grade-reporter")
