"""A JSON POST over urllib (standard library only) for OpenAI-compatible servers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from sao_env.errors import UserError


def post_json(
    url: str,
    payload: dict[str, Any],
    *,
    api_key: str | None = None,
    timeout_s: float = 600.0,
    retries: int = 3,
) -> dict[str, Any]:
    """POST ``payload`` as JSON and return the decoded reply.

    Connection failures, 429 and 5xx replies are retried ``retries`` times with back-off
    (1 s, 2 s, 4 s); then, like any other 4xx reply, they become a one-line UserError.
    """
    body = json.dumps(payload).encode("utf-8")
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    last_error = ""
    for attempt in range(retries + 1):
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310  (user-given URL)
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as err:
            detail = err.read().decode("utf-8", "replace")[:200].replace("\n", " ")
            last_error = f"HTTP {err.code}: {detail}"
            if err.code != 429 and err.code < 500:
                break
        except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as err:
            last_error = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
        if attempt < retries:
            time.sleep(2.0**attempt)
    raise UserError(f"request to {url} failed ({last_error})")
