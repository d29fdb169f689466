"""Fixtures of the vLLM engine tests: the vLLM venv's python, the demo models and one session-wide
pool of vLLM servers (tests/support/vllm_engine.py), stopped at the end of the session."""

from __future__ import annotations

import pytest
from support.engine import built_models
from support.vllm_engine import VLLMServerPool, checked_vllm_python


@pytest.fixture(scope="session")
def vllm_python():
    """The vLLM venv's python (skipped when missing, failed under EAGLE3SCOPE_REQUIRE_ENGINE=1)."""
    return checked_vllm_python()


@pytest.fixture(scope="session")
def vllm_models(vllm_python):
    """The trained Llama demo target and drafts (cached; built with the vLLM venv's torch if missing)."""
    return built_models("llama", vllm_python)


@pytest.fixture(scope="session")
def vllm_pool(vllm_python, tmp_path_factory):
    pool = VLLMServerPool(vllm_python, tmp_path_factory.mktemp("vllm-servers"))
    yield pool
    pool.close()
