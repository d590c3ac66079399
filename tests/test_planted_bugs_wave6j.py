"""The mechanical rounds of seeds 3 and 6 re-checked with the corrected tool (``bench/mutants.py --since 1cf44aa --count 30
--seed 3 --wider --tests-at 3a2577b``, and ``--seed 6 --operators hand --tests-at 4ca2c77``; docs/testing.md): one test per survivor whose line is still in the code.
Each names its change, fails with it and passes without it, and asserts values worked out here."""

from __future__ import annotations

import os

import pytest


def test_a_working_copys_footprint_counts_links_as_themselves(tmp_path):
    """Changed: ``entry.stat(follow_symlinks=False)`` -> ``True`` in ``workdir.footprint`` (``local.footprint`` at
    3a2577b; the round's survivor), and ``entry.is_dir(follow_symlinks=False)`` -> ``True`` beside it: a link is one
    entry of the copy that takes the page of its own (its target's path), whatever it points to, so neither a large
    file nor a folder behind a link is counted. Worked out: ``a`` (5000 bytes) takes 2 pages, each link 1 page, 3
    entries; following the file link would count its 5 pages, following the folder link its 3 files."""
    from sao_env.sandbox.workdir import footprint

    page = os.sysconf("SC_PAGE_SIZE")
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("x", "y", "z"):
        (outside / name).write_text("o" * 10)
    (tmp_path / "big").write_text("b" * (5 * page))
    work = tmp_path / "work"
    work.mkdir()
    (work / "a").write_text("a" * 5000)
    (work / "folder-link").symlink_to(outside, target_is_directory=True)
    (work / "file-link").symlink_to(tmp_path / "big")
    assert footprint(work) == ((-(-5000 // page) + 1 + 1) * page, 3)


def test_files_sent_to_a_warm_server_count_two_entries_each_and_whole_pages():
    """Changed: ``2 * len(files)`` -> ``3 * len(files)`` in ``warm._files_footprint``: each file is counted as itself
    and at most one new folder (the generous count the capped copy's inode allowance is sized from), and its
    bytes in whole pages, an empty file one page. Worked out for 5000 bytes, an empty file and one 4-byte
    multibyte character: 2 + 1 + 1 pages, 6 entries."""
    from sao_env.sandbox.warm import _files_footprint

    page = os.sysconf("SC_PAGE_SIZE")
    files = {"a.py": "x" * 5000, "pkg/empty.txt": "", "pkg/sub/emoji.txt": "\U0001F600"}
    assert _files_footprint(files) == ((-(-5000 // page) + 1 + 1) * page, 6)


def test_the_engines_scratch_folder_is_in_memory_only_where_shm_can_be_written(tmp_path, monkeypatch):
    """Changed: ``shm.is_dir() and os.access(shm, os.W_OK)`` -> ``or`` in ``generator.scratch_folder``: a /dev/shm
    that this process cannot write (a read-only mount, another user's) is not used; the folder goes to the
    temporary folder instead (here ``tmp_path``, as ``TMPDIR``). Where /dev/shm can be written it is used."""
    import shutil
    import tempfile

    from sao_env.engine import generator

    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here to contrast with")
    writable = generator.scratch_folder("sao-test-")
    try:
        assert writable.parent == generator.Path("/dev/shm")
    finally:
        shutil.rmtree(writable)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_access = os.access
    monkeypatch.setattr(generator.os, "access",
                        lambda path, mode: False if str(path) == "/dev/shm" else real_access(path, mode))
    fallback = generator.scratch_folder("sao-test-")
    assert fallback.parent == tmp_path and fallback.is_dir()


def test_a_finding_line_goes_on_past_a_board_with_a_lead_to_the_boards_after_it():
    """Changed: ``continue`` -> ``break`` in ``finding._boards_words``'s pass over the boards without a lead: a board
    with a supported lead, met first, must not end the line, so the boards after it still get their clause. Two
    single-turn boards, the first led by sao, the second a tie over two recipes; worked out: the led clause, then
    the tie's, and the two means' first recipes differ, so no common first."""
    from sao_env.leaderboard.finding import LEAD, SHARED, TIE, Place, Standing, _boards_words

    def place(name, arms):
        return Place("boards", "boards", name, name, f"{name}.md", name, 1,
                     {label: Standing(mean, None, 3, low, high, 2, standing) for label, mean, low, high, standing in arms})

    led = place("style-drift", [("sao", 0.6, 1, 1, LEAD), ("grpo", 0.5, 2, 2, "behind")])
    tie = place("topic-drift", [("grpo", 0.4, 1, 2, TIE), ("sao", 0.3, 1, 2, TIE)])
    assert _boards_words([led, tie]) == ("sao leads with support on style-drift; "
                                         "on topic-drift every pair is a tie (grpo first by the means)")
    # the pass over the led boards (its ``continue`` after a shared lead -> ``break``, the round's other survivor
    # there): a shared lead met first must not end it either (grpo first by the means there, sao here: no common)
    shared = place("tool-drift", [("sao", 0.6, 1, 2, SHARED), ("grpo", 0.7, 1, 2, SHARED),
                                  ("running_mean", 0.2, 3, 3, "behind")])
    assert _boards_words([shared, led]) == ("sao and grpo share a supported lead on tool-drift, ahead of the other 1 "
                                            "recipe; sao leads with support on style-drift")


def test_a_maps_line_counts_each_maps_cells_in_the_singular_where_it_has_one():
    """Seed 6's round (``--operators hand``, re-checked at 4ca2c77; docs/testing.md). Changed: ``p.group == g`` ->
    ``p.group_title == g`` in the plural test of ``finding._maps_line``'s head: every map then counts 0 cells for its
    ``s`` and reads "1 cells". Two maps, one of one cell, one of two; no cell led. Worked out: "Critic map, 1 cell;
    Regime map, 2 cells", then the clause for three cells without a lead."""
    from sao_env.leaderboard.finding import TIE, Place, Standing, _maps_line

    def cell(group, title, name):
        return Place(group, title, name, name, f"{group}/README.md", name, 1,
                     {label: Standing(0.5, None, 3, 1, 2, 2, TIE) for label in ("sao", "grpo")})

    cells = [cell("critic", "Critic map: when a learned value pays", "tool-drift at K 2"),
             cell("regimes", "Regime map: where asynchrony pays", "style-drift at sd 0"),
             cell("regimes", "Regime map: where asynchrony pays", "style-drift at sd 1")]
    assert _maps_line(cells) == ("**Maps of recipes** (Critic map, 1 cell; Regime map, 2 cells): "
                                 "no cell has a supported lead: first place is a tie in all 3.")


def test_a_table_that_cannot_be_read_names_why_also_for_an_error_without_an_errno(tmp_path, monkeypatch):
    """Seed 6's round. Changed: ``err.strerror or err`` -> ``err.strerror`` in ``board.read_table``
    (``tables.read_table`` at 4ca2c77): an OSError raised with a message and no errno (a file system's own
    error, a wrapper's) has no ``strerror``, and the line said "(None)". The real case first: a folder where the
    table should be gives the system's words."""
    from pathlib import Path

    from sao_env.errors import UserError
    from sao_env.leaderboard.board import read_table

    folder = tmp_path / "style-drift-runs.csv"
    folder.mkdir()
    with pytest.raises(UserError, match=r"style-drift-runs\.csv: cannot read the table \(Is a directory\)$"):
        read_table(folder)
    table = tmp_path / "tool-drift-runs.csv"
    table.write_text("agent,seed\nsao,0\n")

    def read_bytes(self):
        raise OSError("the network mount went away")

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(UserError, match=r"tool-drift-runs\.csv: cannot read the table \(the network mount went away\)$"):
        read_table(table)


def test_a_sandboxed_runs_duration_is_the_wall_time_it_took(tmp_path):
    """Seed 6's round. Changed: ``self._collect(proc, started, timeout_s)`` -> ``(proc, timeout_s, started)`` in the
    local executor's ``run``: the deadline (their sum) is the same, but ``duration_s`` became the clock minus the
    timeout, some hours (the sandbox probes read it: a run killed at its timeout that took longer was "not
    stopped"). Measured around each call here: the run's duration lies between what its program sleeps (or its
    timeout) and the wall time of the whole call."""
    import time

    from sao_env.sandbox import LocalExecutor

    executor = LocalExecutor()
    for sleep_s, timeout_s in ((0.3, 20.0), (30.0, 0.5)):
        before = time.monotonic()
        result = executor.run([executor.python, "-c", f"import time; time.sleep({sleep_s})"], workdir=tmp_path,
                              timeout_s=timeout_s)
        took = time.monotonic() - before
        assert result.timed_out == (sleep_s > timeout_s)
        assert min(sleep_s, timeout_s) <= result.duration_s <= took, (result, took)


def test_the_cap_mounts_its_tmpfs_on_the_folder_under_its_own_source_name(tmp_path):
    """Seed 6's round. Changed: the source and the target of ``mount(2)`` swapped in ``workdir._mount_tmpfs``
    (``local.py`` at 4ca2c77): every mount fails, the probe then says no cap can be made here, and every test of the
    cap skips itself as on a machine without root. So the probe is held to mount(8)'s own answer, and a cap is
    read back from the kernel's mount table: a tmpfs on the folder, its source ``sao-cap:`` and the owner, its size
    the cap's 1 MiB."""
    import subprocess
    from pathlib import Path

    from sao_env.sandbox import workdir

    probe = tmp_path / "probe"
    probe.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "sao-test", str(probe)],
                                                   capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("mount(8) cannot mount a tmpfs here (it needs root and a kernel that lets it)")
    subprocess.run(["umount", str(probe)], check=True)
    workdir.cap_available.cache_clear()
    assert workdir.cap_available()
    folder = tmp_path / "work"
    folder.mkdir()
    workdir.mount_cap(folder, 1)
    try:
        mine = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if line.split()[4] == str(folder)]
        assert len(mine) == 1, mine
        kind, source, options = mine[0].split(" - ")[1].split()[:3]
        assert kind == "tmpfs" and source.startswith(workdir.CAP_SOURCE + ":")
        assert "size=1024k" in options.split(","), options
    finally:
        workdir.unmount(folder)
