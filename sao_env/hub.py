"""The Hugging Face hub as a user meets it: offline, unreachable, or asked for a model id that does not exist.

The hub's clients retry an unreachable host for half a minute and then raise a page of traceback. Here the
host is tried once (a TCP connection, a few seconds at most, remembered for the process); when it cannot be
reached the clients are put in offline mode, so that what the local cache holds still loads and what it lacks
fails at once, and the caller says so in one line (``UserError``).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from sao_env.errors import UserError

TINY_NAMES = ("tiny-qwen2", "tiny-llama")
"""Models built from a config (sao_env.policy.model): nothing to fetch."""

OFFLINE_HINT = ("HF_HUB_OFFLINE is set: only the local Hugging Face cache is read")

_reachable: dict[str, str | None] = {}


def endpoint() -> str:
    """The hub's address (``$HF_ENDPOINT`` or huggingface.co)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def offline() -> bool:
    """True when the user asked for offline mode (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def unreachable(timeout_s: float = 3.0) -> str | None:
    """Why the hub cannot be reached (one TCP connection to its host, tried once per process), or None."""
    url = endpoint()
    if url not in _reachable:
        parsed = urlparse(url)
        host, port = parsed.hostname or url, parsed.port or (80 if parsed.scheme == "http" else 443)
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                _reachable[url] = None
        except OSError as err:
            _reachable[url] = f"{host}:{port}: {err.strerror or err}"
    return _reachable[url]


@contextlib.contextmanager
def offline_mode():
    """Put the hub's clients (huggingface_hub, datasets, transformers) in offline mode for the block."""
    import importlib

    modules = []
    for name in ("huggingface_hub.constants", "datasets.config"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:  # pragma: no cover
            continue
    saved = [(m, m.HF_HUB_OFFLINE) for m in modules if hasattr(m, "HF_HUB_OFFLINE")]
    for module, _ in saved:
        module.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for module, value in saved:
            module.HF_HUB_OFFLINE = value


@contextlib.contextmanager
def reach_or_cache():
    """Offline mode for the block when the user asked for it or the hub cannot be reached; yields why
    (``None`` when the hub is reachable and the clients go online as usual)."""
    if offline():
        yield OFFLINE_HINT
        return
    why = unreachable()
    if why is None:
        yield None
        return
    with offline_mode():
        yield f"cannot reach {endpoint()} ({why})"


def looks_like_path(name: str) -> bool:
    """A name that can only be a local folder: absolute, relative with ./ or ../, ~, or with two slashes."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or name in (".", "..")


def check_model(name: str, *, network: bool = True) -> None:
    """Raise a one-line UserError when the policy model ``name`` cannot be loaded here, in a second or
    two: a local folder that does not exist or holds no config.json, an id the hub rejects in form, an id
    neither in the local cache nor reachable (offline, or the hub unreachable), or, with the hub reachable,
    an id the hub does not know. ``network=False`` (a dry run) looks only at the disk."""
    if name in TINY_NAMES:
        return
    from sao_env.policy import packaged

    if packaged.is_packaged(name):
        packaged.gguf_path(packaged.PACKAGED[name])  # installed, or one line saying how
        return
    path = Path(name).expanduser()
    if path.exists() or looks_like_path(name):
        if not path.is_dir():
            raise UserError(f"agent.model.name {name!r}: no such folder (a local model is a folder holding "
                            "config.json and the weights; a hub id is ORG/NAME)")
        if not (path / "config.json").is_file():
            raise UserError(f"agent.model.name {name!r}: the folder holds no config.json")
        return
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as err:
        raise UserError(f"agent.model.name {name!r} is neither a local folder nor a Hugging Face model id "
                        f"({str(err).splitlines()[0]})") from None
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    if offline():
        raise UserError(f"model {name!r} is not in the local Hugging Face cache and {OFFLINE_HINT}; check the id, "
                        "or download it where the hub is reachable (or give a local folder)")
    if not network:
        return
    why = unreachable()
    if why is not None:
        raise UserError(f"model {name!r} is not in the local Hugging Face cache and the hub cannot be reached "
                        f"({why}); check the id and the network, or give a local folder")
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        model_info(name, timeout=10)
    except GatedRepoError:
        raise UserError(f"model {name!r} is gated on the Hugging Face hub: accept its terms and log in "
                        "(hf auth login or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise UserError(f"no model {name!r} on the Hugging Face hub (a typo? or a private model: log in "
                        "with hf auth login or HF_TOKEN)") from None
    except Exception:  # noqa: BLE001  (a slow or flaky hub: loading says what it meets)
        return
