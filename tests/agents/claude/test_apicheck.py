"""doctor --check-api's request, against the loopback fake Messages API."""

from __future__ import annotations

import time

import pytest

from spider2local.agents.claude.apicheck import check_api
from spider2local.testing.fake_api import FakeAnthropic, Hang, HttpError, Turn, reply

KEY = "sk-ant-test-secret-0123456789"


def fake_env(fake: FakeAnthropic, **extra: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": fake.base_url + "/", "ANTHROPIC_API_KEY": KEY, **extra}


def test_ok_sends_one_tiny_request_with_the_key_and_model() -> None:
    with FakeAnthropic([reply("Hi", input_tokens=5, output_tokens=1)]) as fake:
        got = check_api(fake_env(fake), "claude-test-model", timeout=10)
        requests = fake.requests
    assert got.ok, got.detail
    assert "HTTP 200" in got.detail and "claude-test-model" in got.detail
    assert KEY not in got.detail
    assert len(requests) == 1
    assert requests[0].path == "/v1/messages"  # the trailing / of the base URL is not doubled
    assert requests[0].body["max_tokens"] == 1
    assert requests[0].body["model"] == "claude-test-model"
    assert not requests[0].body.get("stream")


@pytest.mark.parametrize(("turn", "expected"), [
    (HttpError(529), "HTTP 529"),
    (HttpError(401, "authentication_error", f"invalid x-api-key {KEY}"), "HTTP 401"),
])
def test_an_http_error_is_reported_with_status_and_message(turn: Turn, expected: str) -> None:
    with FakeAnthropic([turn]) as fake:
        got = check_api(fake_env(fake), "m", timeout=10)
    assert not got.ok
    assert got.detail.startswith(expected), got.detail
    assert "_error" in got.detail  # the API's error type (overloaded_error, authentication_error)
    assert KEY not in got.detail  # a server echoing the key does not make doctor print it


def test_a_hanging_api_is_a_timeout_not_a_hang() -> None:
    with FakeAnthropic([Hang()]) as fake:
        started = time.monotonic()
        got = check_api(fake_env(fake), "m", timeout=0.5)
        took = time.monotonic() - started
    assert not got.ok and "no answer" in got.detail and "0.5s" in got.detail
    assert took < 5


def test_no_credential_and_no_server_are_one_line_each() -> None:
    got = check_api({"ANTHROPIC_API_KEY": "  "}, "m", timeout=1)
    assert not got.ok and "set ANTHROPIC_API_KEY" in got.detail
    with FakeAnthropic([]) as fake:
        url = fake.base_url
    got = check_api({"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}, "m", timeout=2)
    assert not got.ok and got.detail.startswith("cannot reach") and KEY not in got.detail


def test_a_bearer_token_is_sent_as_the_cli_would() -> None:
    with FakeAnthropic([reply("Hi")]) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "CLAUDE_CODE_OAUTH_TOKEN": "tok"}
        assert check_api(env, "m", timeout=10).ok
