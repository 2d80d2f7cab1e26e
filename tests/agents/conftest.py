"""What every agent test starts from: no API settings from the environment, and a fake LLM server."""

import pytest

from tests.fake_llm_server import FakeLLMServer

API_ENVS = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


@pytest.fixture(autouse=True)
def no_api_settings(monkeypatch):
    for name in API_ENVS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    with FakeLLMServer() as running:
        yield running
