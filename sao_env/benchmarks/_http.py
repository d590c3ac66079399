"""JSON POSTs to OpenAI-compatible servers over one pooled httpx client.

A rate-limited judge over thousands of requests needs three things the standard library does not
give: connections kept alive and reused across requests and threads, the server's ``Retry-After``
honoured, and a retry budget the user sets (``RetryPolicy``; ``SAO_ENV_HTTP_RETRIES`` and
``SAO_ENV_HTTP_MAX_WAIT_S`` change the defaults).

A hostile or hung server must not hold the command: each try has a total deadline (connect, send,
headers and the whole body; the body is streamed and the socket shut down when the deadline
passes, so a server sending one byte a second is cut off too), a reply is read up to a byte cap,
and ``stop_all`` (called when the command is stopped) ends every request in flight at once.
A request that cannot succeed raises ``RequestFailed`` with a one-line reason.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from sao_env.errors import UserError

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Replies worth another try: timeouts, rate limits, overload and gateway errors."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a failed request is tried again."""

    retries: int = 8
    """Further tries after the first (so ``retries + 1`` requests at most)."""
    backoff_s: float = 1.0
    """First wait without a ``Retry-After``; doubles per try."""
    max_wait_s: float = 120.0
    """Longest single wait, ``Retry-After`` included."""

    @classmethod
    def from_env(cls, retries: int | None = None) -> "RetryPolicy":
        """Defaults, ``$SAO_ENV_HTTP_RETRIES`` / ``$SAO_ENV_HTTP_MAX_WAIT_S``, then ``retries`` when given."""
        try:
            env_retries = int(os.environ.get("SAO_ENV_HTTP_RETRIES", cls.retries))
            max_wait = float(os.environ.get("SAO_ENV_HTTP_MAX_WAIT_S", cls.max_wait_s))
        except ValueError as err:
            raise UserError(f"SAO_ENV_HTTP_RETRIES / SAO_ENV_HTTP_MAX_WAIT_S must be numbers ({err})") from None
        chosen = env_retries if retries is None else retries
        if not math.isfinite(max_wait):
            raise UserError(f"SAO_ENV_HTTP_MAX_WAIT_S must be a finite number of seconds, not {max_wait}")
        if chosen < 0 or max_wait < 0:
            raise UserError("the HTTP retry budget and the longest wait must be >= 0")
        return cls(retries=chosen, max_wait_s=max_wait)

    def wait_s(self, attempt: int, retry_after: float | None) -> float:
        """Seconds before try ``attempt + 1``: the server's ``Retry-After`` when it sent one, else back-off."""
        wanted = retry_after if retry_after is not None else self.backoff_s * 2.0**attempt
        return max(0.0, min(wanted, self.max_wait_s))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked for by a ``Retry-After`` header: delta-seconds or an HTTP date; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


DEFAULT_MAX_REPLY_BYTES = 8 * 1024 * 1024
"""Largest reply read (8 MiB: a 32,768-token response is far below it); more is a failed, capped sample."""


class RequestFailed(UserError):
    """A request that cannot succeed: a 4xx other than those in ``RETRY_STATUS``, retries exhausted,
    a reply over the byte cap, or the command being stopped. ``reason`` is one line."""

    def __init__(self, url: str, reason: str, capped_bytes: int | None = None):
        super().__init__(f"request to {url} failed ({reason})")
        self.reason = reason
        self.capped_bytes = capped_bytes


class _Capped(Exception):
    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class _DeadlinePassed(Exception):
    pass


STOP = threading.Event()
"""Set by ``stop_all``: requests in flight end, and no new try starts, until ``reset_stop``."""

_IN_FLIGHT: set[socket.socket] = set()
_IN_FLIGHT_LOCK = threading.Lock()


def stop_all() -> None:
    """End every request in flight now (their sockets are shut down) and refuse new tries."""
    STOP.set()
    with _IN_FLIGHT_LOCK:
        for sock in list(_IN_FLIGHT):
            _shutdown(sock)


def reset_stop() -> None:
    """Allow requests again (the start of a command)."""
    STOP.clear()


def _shutdown(sock: socket.socket) -> None:
    """Wake a thread blocked reading ``sock``: its read returns end-of-file."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def env_number(name: str, default: float) -> float:
    """``$name`` as a positive number, else ``default``; a UserError when it is not one."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{name} must be a number, not {raw!r}") from None
    if not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, not {raw!r}")
    if value <= 0:
        raise UserError(f"{name} must be greater than 0")
    return value


def max_reply_bytes(value: int | None = None) -> int:
    """The byte cap of one reply: ``value``, else ``$SAO_ENV_HTTP_MAX_REPLY_BYTES``, else 8 MiB."""
    if value is not None:
        if value < 1:
            raise UserError("--max-reply-bytes must be at least 1")
        return int(value)
    cap = env_number("SAO_ENV_HTTP_MAX_REPLY_BYTES", DEFAULT_MAX_REPLY_BYTES)
    if not float(cap).is_integer():
        raise UserError(f"SAO_ENV_HTTP_MAX_REPLY_BYTES must be a whole number of bytes, not {cap:g}")
    return int(cap)


_CLIENT: httpx.Client | None = None
_CLIENT_LOCK = threading.Lock()


def client() -> httpx.Client:
    """The shared client: thread-safe, keeps up to 64 connections alive; timeouts are set per request."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
            _CLIENT = httpx.Client(timeout=60.0, limits=limits)
        return _CLIENT


def _socket_of(response: httpx.Response) -> socket.socket | None:
    stream = response.extensions.get("network_stream")
    return stream.get_extra_info("socket") if stream is not None else None


def _read_body(response: httpx.Response, deadline: float, max_bytes: int) -> bytes:
    """The body, streamed: ``_DeadlinePassed`` past the monotonic ``deadline``, ``_Capped`` past ``max_bytes``.

    A timer shuts the socket down at the deadline, so a read blocked between two trickled bytes ends then."""
    sock = _socket_of(response)
    timer = None
    if sock is not None:
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), _shutdown, args=(sock,))
        timer.daemon = True
        timer.start()
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT.add(sock)
    chunks, size = [], 0
    try:
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise _Capped(max_bytes)
            chunks.append(chunk)
            if time.monotonic() >= deadline:
                raise _DeadlinePassed()
    except httpx.HTTPError:
        if time.monotonic() >= deadline:
            raise _DeadlinePassed() from None
        raise
    finally:
        if timer is not None:
            timer.cancel()
            with _IN_FLIGHT_LOCK:
                _IN_FLIGHT.discard(sock)
    return b"".join(chunks)


def _one_try(url: str, body: bytes, headers: dict, deadline_s: float, max_bytes: int) -> tuple[int, dict, bytes]:
    """One POST within ``deadline_s``: (status, headers, body at most ``max_bytes``)."""
    deadline = time.monotonic() + deadline_s
    timeout = httpx.Timeout(deadline_s, connect=min(deadline_s, 30.0))
    with client().stream("POST", url, content=body, headers=headers, timeout=timeout) as response:
        return response.status_code, dict(response.headers), _read_body(response, deadline, max_bytes)


def _first_line(err: Exception) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"


def post_json(
    url: str,
    payload: dict[str, Any],
    *,
    api_key: str | None = None,
    deadline_s: float = 600.0,
    max_bytes: int | None = None,
    retries: int | None = None,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] | None = None,
) -> dict[str, Any]:
    """POST ``payload`` as JSON and return the decoded reply.

    Each try must end within ``deadline_s`` (headers and whole body); the reply is read up to
    ``max_bytes`` (default ``max_reply_bytes()``), and a larger one fails at once. Connection errors,
    deadlines, invalid JSON and the replies in ``RETRY_STATUS`` are tried again up to the policy's
    budget (``retries`` overrides its count), waiting what ``Retry-After`` asks or an exponential
    back-off; then, like any other 4xx reply, they raise ``RequestFailed`` (a UserError) with one line.
    """
    policy = policy or RetryPolicy.from_env(retries)
    max_bytes = max_bytes or max_reply_bytes()
    wait = sleep or STOP.wait
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = json.dumps(payload).encode("utf-8")
    last_error = ""
    for attempt in range(policy.retries + 1):
        if STOP.is_set():
            raise RequestFailed(url, "stopped")
        retry_after = None
        try:
            status, reply_headers, content = _one_try(url, body, headers, deadline_s, max_bytes)
        except _Capped as capped:
            raise RequestFailed(url, f"reply capped at {capped.size:,} bytes", capped_bytes=capped.size) from None
        except _DeadlinePassed:
            last_error = f"no complete reply within the {deadline_s:g}-s deadline"
        except httpx.TimeoutException:
            last_error = f"no complete reply within the {deadline_s:g}-s deadline"
        except httpx.HTTPError as err:
            last_error = _first_line(err)
        else:
            if status < 400:
                try:
                    return json.loads(content)
                except ValueError as err:
                    last_error = f"invalid JSON in the reply ({err})"
            else:
                detail = content[:200].decode("utf-8", errors="replace").replace("\n", " ")
                last_error = f"HTTP {status}: {detail}"
                if status not in RETRY_STATUS:
                    break
                retry_after = parse_retry_after(reply_headers.get("retry-after"))
        if STOP.is_set():
            raise RequestFailed(url, "stopped")
        if attempt < policy.retries:
            wait(policy.wait_s(attempt, retry_after))
    raise RequestFailed(url, last_error)
