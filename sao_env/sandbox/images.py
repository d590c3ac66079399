"""The sandbox image, built from Debian's own packages: no container registry involved.

    sao-env images build                  # builds sao-env/sandbox:<recipe hash> unless it is there
    from sao_env.sandbox.images import ensure_image
    tag = ensure_image()                  # the tag, built first when missing

The recipe: ``mmdebstrap --variant=minbase`` of the host's Debian release (``python3``, ``git``,
``patch``, ``tini``) from the mirror apt uses on this machine, with the harness's own pytest and its
pure-Python dependencies copied in from the running interpreter (so that a test log reads the same
in a container as under bubblewrap), byte-compiled, then ``docker import``. The tag is the hash of
that recipe: a changed package list or pytest version is a new tag, an unchanged one is reused.
Builds take a lock, so processes that need the image at once build it once.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sao_env.errors import UserError, install_command
from sao_env.sandbox.base import one_line

REPOSITORY = "sao-env/sandbox"
RECIPE_VERSION = 1
DEBIAN_PACKAGES = ("python3", "git", "patch", "tini")
"""tini: the init of SWE-bench instance images made from this one (their ``tail -f /dev/null`` then stops on
SIGTERM at once instead of after docker's 10-15 s grace)."""
PYTHON_PACKAGES = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")
"""Copied from the running interpreter: pytest and what it imports (all pure Python)."""
EXCLUDED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
"""Left out of the image (dpkg path-exclude): documentation and translations."""
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
LABEL = "sao-env.recipe"


@dataclass(frozen=True)
class Recipe:
    """What the image is made of; ``tag`` is ``REPOSITORY:<first 12 hex of its hash>``."""

    suite: str
    packages: tuple[str, ...]
    python: tuple[tuple[str, str], ...]
    """(distribution, version) of each copied Python package."""
    mirror: str
    """Where the packages come from: not part of the hash (any mirror serves the same suite)."""

    def identity(self) -> dict[str, Any]:
        return {"version": RECIPE_VERSION, "variant": "minbase", "suite": self.suite, "packages": list(self.packages),
                "python": dict(self.python), "excluded": list(EXCLUDED)}

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.digest[:12]}"

    def describe(self) -> str:
        python = ", ".join(f"{name} {version}" for name, version in self.python)
        return f"Debian {self.suite} ({', '.join(self.packages)}) with {python}"


# --- the host's Debian ---------------------------------------------------------------------------

def host_suite(os_release: Path = Path("/etc/os-release")) -> str:
    """The host's Debian codename (``VERSION_CODENAME``), else ``DEFAULT_SUITE``."""
    try:
        fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line)
    except OSError:
        return DEFAULT_SUITE
    if fields.get("ID", "").strip('"') != "debian":
        return DEFAULT_SUITE
    return fields.get("VERSION_CODENAME", "").strip('"') or DEFAULT_SUITE


def apt_mirror(suite: str, root: Path = Path("/etc/apt")) -> str:
    """The URI apt on this machine uses for ``suite`` (deb822 ``.sources`` and one-line ``.list``
    files; ``.disabled`` ones ignored), else ``DEFAULT_MIRROR``."""
    files = [root / "sources.list"] + sorted((root / "sources.list.d").glob("*.list")) + \
        sorted((root / "sources.list.d").glob("*.sources"))
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.strip().startswith("#") or ":" not in line:
                        continue
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.strip()
                if fields.get("enabled", "yes").lower() == "no" or "deb" not in fields.get("types", "").split():
                    continue
                if suite in fields.get("suites", "").split() and fields.get("uris"):
                    return fields["uris"].split()[0]
        else:
            for line in text.splitlines():
                words = [w for w in re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()]
                if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                    return words[1]
    return DEFAULT_MIRROR


def _python_packages() -> tuple[tuple[str, str], ...]:
    out = []
    for name in PYTHON_PACKAGES:
        try:
            out.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            raise UserError(f"the sandbox image copies {name} from this interpreter, which lacks it: "
                            f"{install_command('dev')}") from None
    return tuple(out)


def recipe() -> Recipe:
    """The recipe of this machine's sandbox image."""
    suite = host_suite()
    return Recipe(suite, DEBIAN_PACKAGES, _python_packages(), apt_mirror(suite))


def _python_files(names: tuple[str, ...]) -> list[tuple[Path, str]]:
    """(host path, path inside site-packages) of every file of the packages, ``__pycache__`` left out."""
    files: list[tuple[Path, str]] = []
    for name in names:
        dist = importlib.metadata.distribution(name)
        for entry in dist.files or []:
            rel = entry.as_posix()
            if rel.startswith("..") or "__pycache__" in rel or rel.startswith("/"):
                continue
            source = Path(str(dist.locate_file(entry)))
            if source.suffix in (".so", ".pyd"):
                raise UserError(f"{name} has a compiled extension ({rel}): the sandbox image copies pure Python only")
            if source.is_file():
                files.append((source, rel))
    return files


# --- the engine ----------------------------------------------------------------------------------

def client(timeout: int = 30):
    """A docker SDK client that answered a ping; UserError (one line) otherwise."""
    try:
        import docker
    except ImportError:
        raise UserError(f"the Docker sandbox needs the docker SDK: {install_command('swe')}") from None
    try:
        handle = docker.from_env(timeout=timeout)
        handle.ping()
    except Exception as exc:  # noqa: BLE001 - any failure to reach the engine is the same news
        raise UserError(f"no Docker engine reachable ({one_line(exc)}): the Docker sandbox needs one") from None
    return handle


def present(tag: str, docker_client: Any = None) -> bool:
    handle = docker_client if docker_client is not None else client()
    try:
        handle.images.get(tag)
        return True
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        return False


def _lock_path() -> Path:
    return Path(tempfile.gettempdir()) / f"sao-env-images-{os.getuid()}.lock"


def ensure_image(*, force: bool = False, report: Callable[[str], None] | None = None,
                 docker_client: Any = None) -> str:
    """The sandbox image's tag: reused when present, else built (``report`` gets one line either way)."""
    say = report or (lambda line: None)
    spec = recipe()
    handle = docker_client if docker_client is not None else client()
    if not force and present(spec.tag, handle):
        say(f"{spec.tag} present: {spec.describe()}")
        return spec.tag
    with open(_lock_path(), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait, then look again
        if not force and present(spec.tag, handle):
            say(f"{spec.tag} present (built by another process): {spec.describe()}")
            return spec.tag
        started = time.monotonic()
        size = build(spec, handle)
        say(f"built {spec.tag} in {time.monotonic() - started:.0f} s ({size / 1e6:.0f} MB): {spec.describe()}, "
            f"packages from {spec.mirror}")
    return spec.tag


def build(spec: Recipe, handle: Any) -> int:
    """mmdebstrap + docker import; returns the image's size in bytes. UserError (one line) on failure."""
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise UserError("building the sandbox image needs mmdebstrap (apt-get install -y mmdebstrap)")
    with tempfile.TemporaryDirectory(prefix="sao-image-") as folder:
        work = Path(folder)
        extra = work / "python.tar"
        with tarfile.open(extra, "w") as tar:
            for source, rel in _python_files(tuple(name for name, _ in spec.python)):
                tar.add(source, arcname=rel, recursive=False)
        site = "$(chroot \"$1\" python3 -c 'import site; print(site.getsitepackages()[0])')"
        hook = (f"set -e; dest={site}; mkdir -p \"$1$dest\"; tar -xf {shlex.quote(str(extra))} -C \"$1$dest\"; "
                f"chroot \"$1\" python3 -m compileall -q \"$dest\" >/dev/null")
        argv = [mmdebstrap, "--quiet", "--variant=minbase", f"--include={','.join(spec.packages)}",
                *(f"--dpkgopt=path-exclude={pattern}" for pattern in EXCLUDED),
                f"--customize-hook={hook}", spec.suite, "-", spec.mirror]
        errors = work / "mmdebstrap.err"
        changes = [f"LABEL {LABEL}={spec.digest}", "CMD [\"/bin/bash\"]"]
        repository, tag = spec.tag.split(":")
        with open(errors, "w") as stderr:  # the root file system streams from mmdebstrap into the engine
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                    env={**os.environ, "TMPDIR": _scratch()})
            try:
                chunks = iter(lambda: proc.stdout.read(1 << 20), b"")
                handle.api.import_image(src=chunks, repository=repository, tag=tag, changes=changes,
                                        stream_src=True)
                imported: Exception | None = None
            except Exception as exc:  # noqa: BLE001 - reported after mmdebstrap's own status
                imported = exc
            finally:
                proc.stdout.close()
                status = proc.wait()
        if status != 0:
            lines = [line for line in errors.read_text(errors="replace").splitlines() if line.strip()]
            _remove(handle, spec.tag)
            raise UserError(f"mmdebstrap failed (exit {status}): {one_line(lines[-1] if lines else '')}")
        try:
            if imported is not None:
                raise imported
            image = handle.images.get(spec.tag)
        except Exception as exc:  # noqa: BLE001
            raise UserError(f"docker import of the sandbox image failed: {one_line(exc)}") from None
    return int(image.attrs.get("Size") or 0)


def _scratch() -> str:
    """Where mmdebstrap builds the root file system: /dev/shm when it has room (dpkg on a RAM file
    system: 44 s instead of 130 s measured on this machine's disk), else the usual temporary folder."""
    try:
        stats = os.statvfs("/dev/shm")
        if stats.f_bavail * stats.f_frsize >= 2 << 30 and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    except OSError:
        pass
    return tempfile.gettempdir()


def _remove(handle: Any, tag: str) -> None:
    try:
        handle.images.remove(tag, force=True)
    except Exception:  # noqa: BLE001 - a half-imported image may not exist at all
        pass
