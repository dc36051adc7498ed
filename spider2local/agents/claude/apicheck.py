"""``doctor --check-api``: one tiny real request to the Messages API the Claude agent will use.

Why a real request: a key that is set can still be revoked, out of credit or for another
endpoint, and an outage looks like a working agent until the task's deadline. The request is
the smallest the API accepts (``max_tokens: 1``), to the same endpoint and with the same
credential the CLI takes from the environment (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY`` or
a bearer token). urllib rather than an HTTP library: spider2local does not depend on one (the
SDK's transport is the CLI), and one synchronous POST needs nothing more. The credential is
never printed: it is blanked out of anything the server sends back.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping

from spider2local.agents.registry import ApiStatus

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
OAUTH_BETA = "oauth-2025-04-20"
"""The beta header the API asks of OAuth (``CLAUDE_CODE_OAUTH_TOKEN``) bearer tokens."""
_MESSAGE_LIMIT = 300


def _credential(env: Mapping[str, str]) -> tuple[dict[str, str], str] | None:
    """Headers carrying the credential the CLI would use, and the secret (to blank it)."""
    key = env.get("ANTHROPIC_API_KEY", "").strip()
    if key:
        return {"x-api-key": key}, key
    for name in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        token = env.get(name, "").strip()
        if token:
            headers = {"authorization": f"Bearer {token}"}
            if name == "CLAUDE_CODE_OAUTH_TOKEN":
                headers["anthropic-beta"] = OAUTH_BETA
            return headers, token
    return None


def _custom_headers(env: Mapping[str, str]) -> dict[str, str]:
    """``ANTHROPIC_CUSTOM_HEADERS`` as the CLI reads it: one ``Name: value`` per line."""
    found = {}
    for line in env.get("ANTHROPIC_CUSTOM_HEADERS", "").splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            found[name.strip()] = value.strip()
    return found


def _error_text(body: bytes) -> str:
    """The API's ``{"error": {"type", "message"}}``, else the start of the body."""
    text = body.decode("utf-8", "replace")
    try:
        error = json.loads(text).get("error") or {}
        return f"{error.get('type', 'error')}: {error.get('message', '')}".strip(": ")
    except (ValueError, AttributeError):
        return " ".join(text.split())[:_MESSAGE_LIMIT] or "(empty body)"


def check_api(env: Mapping[str, str], model: str, timeout: float) -> ApiStatus:
    """POST one ``max_tokens: 1`` message to ``$ANTHROPIC_BASE_URL/v1/messages`` (or the
    default endpoint) and say how it went: ok, the HTTP status and the API's message, no
    answer within ``timeout`` seconds, or no connection."""
    url = env.get("ANTHROPIC_BASE_URL", "").strip().rstrip("/") or DEFAULT_BASE_URL
    url += "/v1/messages"
    found = _credential(env)
    if found is None:
        return ApiStatus(False, "no credential (set ANTHROPIC_API_KEY or "
                                "CLAUDE_CODE_OAUTH_TOKEN)")
    auth, secret = found
    body = {"model": model, "max_tokens": 1,
            "messages": [{"role": "user", "content": "Reply with one word."}]}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json", "anthropic-version": API_VERSION,
                 **_custom_headers(env), **auth})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            detail = f"HTTP {response.status} from {url} (model {model}, " \
                     f"{time.monotonic() - started:.1f}s)"
            return ApiStatus(True, detail)
    except urllib.error.HTTPError as exc:
        message = _error_text(exc.read())
        detail = f"HTTP {exc.code} from {url}: {message}"
        return ApiStatus(False, detail.replace(secret, "***")[:_MESSAGE_LIMIT])
    except TimeoutError:
        return ApiStatus(False, f"no answer from {url} within {timeout:g}s")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            return ApiStatus(False, f"no answer from {url} within {timeout:g}s")
        return ApiStatus(False, f"cannot reach {url}: {reason}".replace(secret, "***"))
