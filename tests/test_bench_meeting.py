"""How bench's workers meet under torchrun, with real c10d stores on loopback: rank 0's worker
serves a store of its own on a port the kernel gives it and publishes that port in torchrun's
store; the other ranks' workers read it there, and give up in one line when rank 0's never
comes (rather than wait for torch's half-hour default)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")

from trainstack.bench import device  # noqa: E402
from trainstack.bench.device import Dist, MeetingError  # noqa: E402


@pytest.fixture
def torchrun_store(monkeypatch: pytest.MonkeyPatch):
    """A store where torchrun's agent would serve one, and the variables torchrun sets."""
    agents = torch.distributed.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(agents.port), "TORCHELASTIC_USE_AGENT_STORE": "True",
                       device.MEETING: "7", device.MEETING_TIMEOUT: "2"}.items():
        monkeypatch.setenv(key, value)
    return agents


def test_rank_0_publishes_a_port_of_its_own_and_rank_1_meets_it_there(torchrun_store) -> None:
    own = device.launch_store(Dist(rank=0, world_size=2))
    assert own is not None and own.port != torchrun_store.port
    assert torchrun_store.get("trainstack/bench/0/7") == str(own.port).encode()
    peer = device.launch_store(Dist(rank=1, world_size=2))
    assert peer is not None
    peer.set("from rank 1", "hello")
    assert own.get("from rank 1") == b"hello"  # one store, reached from both ranks


def test_a_rank_whose_rank_0_never_comes_gives_up_in_one_line(torchrun_store) -> None:
    start = time.monotonic()
    with pytest.raises(MeetingError) as info:
        device.launch_store(Dist(rank=1, world_size=2))
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert "\n" not in message and message.startswith("rank 1: rank 0's bench worker did not publish its store within 2 s")


def test_without_a_shareable_torchrun_store_the_environment_decides(torchrun_store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    assert device.launch_store(Dist(rank=1, world_size=2)) is None
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.delenv(device.MEETING)
    assert device.launch_store(Dist(rank=1, world_size=2)) is None


@pytest.mark.parametrize("given", ["soon", "0", "-5", "inf", "1e9"])
def test_a_meeting_timeout_that_is_not_seconds_is_refused_in_one_line(torchrun_store, monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(device.MEETING_TIMEOUT, given)
    with pytest.raises(MeetingError) as info:
        device.launch_store(Dist(rank=1, world_size=2))
    assert str(info.value) == f"{device.MEETING_TIMEOUT}={given!r}: accepted: seconds from 1 to 86400"
