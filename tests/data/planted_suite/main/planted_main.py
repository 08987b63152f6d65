import os
from pathlib import Path

import pytest


def test_passes():
    assert True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_parametrised_passes(n):
    assert n > 0


def test_fails():
    assert 1 == 2


@pytest.mark.parametrize("case", ["first-try", "x[1]"])
def test_flaky(case):
    marker = Path(os.environ["PLANTED_STATE"]) / f"flaky-{case.replace('[', '_').replace(']', '_')}"
    if not marker.exists():
        marker.write_text("failed once")
        assert False, "fails on the first run only"


@pytest.mark.xfail(reason="planted expected failure")
def test_expected_failure():
    assert False


def test_skipped():
    pytest.skip("planted skip")


@pytest.fixture()
def breaks_on_teardown():
    yield 1
    raise RuntimeError("planted teardown error")


def test_teardown_error(breaks_on_teardown):
    assert breaks_on_teardown == 1
