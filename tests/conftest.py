"""Shared test setup: no real network, and no LLM settings leaking in from the environment."""

from __future__ import annotations

import ipaddress
import socket

import pytest

# The scripted OpenAI-compatible server's `openai_server` fixture, for every test module.
pytest_plugins = ("openai_server",)

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class NetworkBlocked(ConnectionRefusedError):
    """A test tried to reach a non-loopback address."""


def _is_loopback(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(address: object) -> None:
    """Raise NetworkBlocked unless `address` is a Unix socket path or a loopback (host, port)."""
    if isinstance(address, (str, bytes)):
        return  # AF_UNIX
    host = address[0] if isinstance(address, tuple) and address else address
    if not _is_loopback(host):
        raise NetworkBlocked(f"network access blocked in tests: {address!r}")


@pytest.fixture(autouse=True)
def _block_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse connections and name lookups for anything but loopback."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_create, real_getaddrinfo = socket.create_connection, socket.getaddrinfo

    def connect(self: socket.socket, address: object) -> None:
        _check(address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: object) -> int:
        _check(address)
        return real_connect_ex(self, address)

    def create_connection(address: tuple, *args: object, **kwargs: object) -> socket.socket:
        _check(address)
        return real_create(address, *args, **kwargs)

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> list:
        if host is not None:
            _check((host.decode() if isinstance(host, bytes) else host,))
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(autouse=True)
def _no_llm_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start with no LLM configured; a test that needs one sets the variables itself."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TRAINPLAN_MODEL"):
        monkeypatch.delenv(name, raising=False)


FIRST_MODULES = ("test_search.py", "test_search_recipes.py", "test_plan_sizing.py", "test_search_targets.py",
                 "test_tradeoffs.py", "test_evidence.py", "test_plan.py")
"""The modules of 13 s or more of CPU (pytest --durations, serially; 2026-12-03), collected first: xdist hands each
module to one worker (--dist loadscope, pyproject.toml) in collection order, so the longest start first and the
workers finish together instead of one waiting on the last long module."""


def pytest_collection_modifyitems(config, items):
    """The longest modules first (FIRST_MODULES; the rest in their own order). `slow` tests run only when asked
    for (`pytest -m slow`); the default run stays quick."""
    def rank(item) -> int:
        name = item.path.name
        return FIRST_MODULES.index(name) if name in FIRST_MODULES else len(FIRST_MODULES)
    items.sort(key=rank)   # stable: each module's tests keep their order
    markexpr = config.getoption("markexpr") or ""
    if "slow" in markexpr and "not slow" not in markexpr:
        return
    skip = pytest.mark.skip(reason="slow: run with pytest -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
