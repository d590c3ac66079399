"""JSON POSTs to OpenAI-compatible servers over one pooled httpx client per endpoint.

A rate-limited judge over thousands of requests needs three things the standard library does not
give: connections kept alive and reused across requests and threads, the server's ``Retry-After``
honoured, and a retry budget the user sets (``RetryPolicy``; ``SAO_ENV_HTTP_RETRIES`` and
``SAO_ENV_HTTP_MAX_WAIT_S`` change the defaults).
"""

from __future__ import annotations

import email.utils
import json
import os
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


_CLIENTS: dict[float, httpx.Client] = {}
_CLIENTS_LOCK = threading.Lock()


def client(timeout_s: float) -> httpx.Client:
    """The shared client for a timeout: thread-safe, keeps up to 64 connections alive."""
    with _CLIENTS_LOCK:
        if timeout_s not in _CLIENTS:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
            _CLIENTS[timeout_s] = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
                                               limits=limits)
        return _CLIENTS[timeout_s]


def post_json(
    url: str,
    payload: dict[str, Any],
    *,
    api_key: str | None = None,
    timeout_s: float = 600.0,
    retries: int | None = None,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """POST ``payload`` as JSON and return the decoded reply.

    Connection errors, timeouts, invalid JSON and the replies in ``RETRY_STATUS`` are tried again
    up to the policy's budget (``retries`` overrides its count), waiting what ``Retry-After``
    asks or an exponential back-off; then, like any other 4xx reply, they become a one-line UserError.
    """
    policy = policy or RetryPolicy.from_env(retries)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = json.dumps(payload).encode("utf-8")
    last_error = ""
    for attempt in range(policy.retries + 1):
        retry_after = None
        try:
            response = client(timeout_s).post(url, content=body, headers=headers)
        except httpx.HTTPError as err:
            last_error = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
        else:
            if response.status_code < 400:
                try:
                    return response.json()
                except ValueError as err:
                    last_error = f"invalid JSON in the reply ({err})"
            else:
                detail = response.text[:200].replace("\n", " ")
                last_error = f"HTTP {response.status_code}: {detail}"
                if response.status_code not in RETRY_STATUS:
                    break
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if attempt < policy.retries:
            sleep(policy.wait_s(attempt, retry_after))
    raise UserError(f"request to {url} failed ({last_error})")
