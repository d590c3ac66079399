"""A sandboxed run's working copy: a fresh copy per episode (``fresh_workdir``), handed to the sandbox
user before a run (``hand_over``), and its size cap (``Limits.workdir_mb``, as root): the copy on a tmpfs
of its size plus the cap for the run (``WorkdirCap``), what the run changed written back to the folder
beneath, and the tmpfs unmounted; mounts left by a killed process are found by their source name and
reaped (``reap_mounts``). Used by the local executor (``sao_env.sandbox.local``), the warm servers and the
Docker executor alike.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import stat
import tempfile
from functools import lru_cache
from pathlib import Path

from sao_env.sandbox.base import ExecResult, at_disk_limit
from sao_env.sandbox.owner import orphaned, owner_name, reap_tempdirs


def fresh_workdir(src: Path, parent: Path | None = None) -> Path:
    """Copy the tree ``src`` into a new temporary directory (under ``parent``) and return it.

    Every episode gets its own copy: runs never share a working copy. The caller removes it.
    """
    dst = Path(tempfile.mkdtemp(prefix="sao-work-", dir=parent))
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    return dst


def checked_workdir(workdir: Path) -> Path:
    """``workdir`` resolved; ValueError for a missing folder or ``/``."""
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise ValueError(f"workdir {workdir} is not a directory")
    if workdir == Path("/"):
        raise ValueError("refusing / as a working copy")
    return workdir


def hand_over(workdir: Path, uid: int) -> None:
    """Make the sandbox user own the working copy (as root only), so that it can write it.

    Symlinks are changed themselves, never followed.
    """
    stack = [str(workdir)]
    if os.lstat(stack[0]).st_uid != uid:
        os.lchown(stack[0], uid, uid)
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    os.lchown(entry.path, uid, uid)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)


# --- the working copy's size cap (Limits.workdir_mb) ------------------------------------------


CAP_SOURCE = "sao-cap"
"""The source name of a capped working copy's tmpfs in the mount table: ``sao-cap:HOST:PID:START``."""
INODES_PER_MB = 64
"""New files and folders a capped run may make per MiB of ``workdir_mb`` (tmpfs inodes are kernel memory)."""

_PAGE = os.sysconf("SC_PAGE_SIZE")
_MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 0x2, 0x4, 0x20
_MNT_DETACH = 0x2
_reaped_mounts = False


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(folder: Path, size: int, inodes: int, extra: str = "", *, remount: bool = False) -> None:
    """Mount (or resize) a tmpfs of ``size`` bytes and ``inodes`` entries at ``folder``; OSError on failure."""
    source = f"{CAP_SOURCE}:{owner_name()}".encode()
    options = f"size={size},nr_inodes={inodes}{extra}".encode()
    flags = _MS_NOSUID | _MS_NODEV | (_MS_REMOUNT if remount else 0)
    if _libc().mount(source, str(folder).encode(), b"tmpfs", flags, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {folder}: {os.strerror(err)}")


def unmount(folder: Path | str) -> None:
    if _libc().umount2(str(folder).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {folder}: {os.strerror(err)}")


@lru_cache(maxsize=1)
def cap_available() -> bool:
    """Whether working copies can be capped here: the harness is root and may mount a tmpfs."""
    if os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory(prefix="sao-cap-probe-") as tmp:
        try:
            _mount_tmpfs(Path(tmp), _PAGE, 16)
        except OSError:
            return False
        unmount(tmp)
    return True


def mount_cap(folder: Path, limit_mb: int, base_bytes: int = 0, base_entries: int = 0, *,
              remount: bool = False) -> None:
    """Put ``folder`` on a tmpfs with room for ``base_bytes`` in ``base_entries`` plus ``limit_mb`` MiB
    in ``INODES_PER_MB * limit_mb`` new entries (``remount``: resize the one there)."""
    global _reaped_mounts
    if not _reaped_mounts:
        _reaped_mounts = True
        reap_mounts()
    size = base_bytes + (limit_mb << 20)
    inodes = base_entries + 1 + INODES_PER_MB * limit_mb
    extra = "" if remount else f",mode={stat.S_IMODE(os.stat(folder).st_mode):o}"
    _mount_tmpfs(folder, size, inodes, extra, remount=remount)


def cap_full(folder: Path) -> bool:
    """The tmpfs at ``folder`` has no room left: under two pages, or no free entry."""
    vfs = os.statvfs(folder)
    return vfs.f_bavail * vfs.f_frsize < 2 * _PAGE or vfs.f_favail == 0


def footprint(root: Path | str) -> tuple[int, int]:
    """(bytes, entries) a copy of the tree inside ``root`` takes on a tmpfs: whole pages per file."""
    size = count = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                count += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    size += max(1, -(-entry.stat(follow_symlinks=False).st_size // _PAGE)) * _PAGE
    return size, count


def reap_mounts() -> int:
    """Unmount the capped working copies of harness processes that are gone (killed mid-run); how many."""
    removed = 0
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return 0
    for line in lines:
        fields, _, tail = line.partition(" - ")
        kind, source = (tail.split() + ["", ""])[:2]
        if kind != "tmpfs" or not source.startswith(CAP_SOURCE + ":") or not orphaned(source[len(CAP_SOURCE) + 1:]):
            continue
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields.split()[4])
        try:
            unmount(target)
            removed += 1
        except OSError:
            pass
    return removed


_reaped_prefixes: set[str] = set()


def reap_left_behind(*prefixes: str) -> None:
    """Once a process for each of ``prefixes``: unmount the capped copies of harness processes that are gone, then
    remove their ``owner.owned_tempdir`` folders of these prefixes (a run killed before it could)."""
    todo = [prefix for prefix in prefixes if prefix not in _reaped_prefixes]
    if todo:
        _reaped_prefixes.update(todo)
        reap_mounts()
        for prefix in todo:
            reap_tempdirs(prefix)


class WorkdirCap:
    """One run's working copy on a tmpfs of its size plus ``limit_mb`` (as root; a no-op otherwise).

    ``open`` mounts the tmpfs over the folder and copies the folder's tree in (read through a
    descriptor of the folder beneath; entries owned by ``owner`` when given); ``judge`` marks a run
    that filled it; ``close`` writes back into the folder beneath what the run changed, and
    unmounts: the caller finds the run's files where it left its own, and at most ``limit_mb`` more.
    """

    def __init__(self, workdir: Path, limit_mb: int | None, owner: int | None = None):
        self.workdir = workdir
        self.active = bool(limit_mb) and cap_available()
        self.limit_mb = limit_mb or 0
        self.owner = owner
        self._below = -1
        self._copied: dict[str, tuple] = {}

    def open(self) -> None:
        if not self.active:
            return
        if self.workdir == Path("/") or not self.workdir.is_dir():
            raise ValueError(f"refusing to cap {self.workdir}")
        below = os.open(self.workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            size, entries = footprint(self.workdir)
            mount_cap(self.workdir, self.limit_mb, size, entries)
        except BaseException:
            os.close(below)
            raise
        self._below = below
        if self.owner is not None:
            os.chown(self.workdir, self.owner, self.owner)
        _sync(self._below_path, str(self.workdir), {}, self.owner)
        self._copied = _snapshot(str(self.workdir))

    @property
    def _below_path(self) -> str:
        return f"/proc/self/fd/{self._below}"

    def judge(self, result: ExecResult) -> ExecResult:
        """``result``, with reason "disk limit" where the run filled the working copy."""
        return at_disk_limit(result) if self._below >= 0 and cap_full(self.workdir) else result

    def close(self) -> None:
        if self._below < 0:
            return
        try:
            _sync(str(self.workdir), self._below_path, self._copied, None)
        finally:
            try:
                unmount(self.workdir)
            finally:
                os.close(self._below)
                self._below = -1


def _key(info: os.stat_result) -> tuple:
    """What changes when an entry is written, replaced, renamed or has its mode, owner or times set."""
    return stat.S_IFMT(info.st_mode), info.st_ino, info.st_ctime_ns, info.st_size, info.st_mtime_ns


def _snapshot(root: str) -> dict[str, tuple]:
    """Relative path -> ``_key`` of every entry inside ``root``."""
    keys: dict[str, tuple] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(root, rel)) as entries:
            for entry in entries:
                path = os.path.join(rel, entry.name)
                keys[path] = _key(entry.stat(follow_symlinks=False))
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)
    return keys


def _sync(src: str, dst: str, unchanged: dict[str, tuple], owner: int | None) -> None:
    """Make the tree inside ``dst`` the one inside ``src``: files, folders and symlinks with their modes,
    owners (``owner`` when given) and times, never following a link. An entry whose ``_key`` is still
    the one in ``unchanged`` is left as it is; other kinds of file, and entries that cannot be copied
    (a path too long), are left out."""
    stack = [""]
    folders: list[tuple[str, os.stat_result]] = []
    while stack:
        rel = stack.pop()
        try:
            entries = {entry.name: entry for entry in os.scandir(os.path.join(src, rel))}
            present = set(os.listdir(os.path.join(dst, rel)))
        except OSError:
            continue
        for name in present - entries.keys():
            _remove(os.path.join(dst, rel, name))
        for name, entry in entries.items():
            path, target = os.path.join(rel, name), os.path.join(dst, rel, name)
            try:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    if name in present and (os.path.islink(target) or not os.path.isdir(target)):
                        _remove(target)
                    if not os.path.isdir(target):
                        os.mkdir(target, 0o700)
                    stack.append(path)
                    folders.append((target, info))
                elif name not in present or unchanged.get(path) != _key(info):
                    if name in present:
                        _remove(target)
                    _copy_entry(entry.path, target, info, owner)
            except OSError:
                continue
    for target, info in reversed(folders):  # children first: adding them changed the times
        try:
            _same_stat(target, info, owner)
        except OSError:
            pass


def _copy_entry(source: str, target: str, info: os.stat_result, owner: int | None) -> None:
    """A copy of the file or symlink ``source`` (other kinds are skipped) at ``target``."""
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISREG(info.st_mode):
        reader = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            writer = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                while os.sendfile(writer, reader, None, 1 << 24):
                    pass
            finally:
                os.close(writer)
        finally:
            os.close(reader)
    else:
        return
    _same_stat(target, info, owner)


def _same_stat(path: str, info: os.stat_result, owner: int | None) -> None:
    uid, gid = (owner, owner) if owner is not None else (info.st_uid, info.st_gid)
    os.lchown(path, uid, gid)
    if not stat.S_ISLNK(info.st_mode):
        os.chmod(path, stat.S_IMODE(info.st_mode))
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def _remove(path: str) -> None:
    """Remove a file, link or whole folder (never following a link); what cannot go stays."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
