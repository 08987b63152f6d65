"""Twenty tests of 0.2 s each, one of them failing: a suite that runs for a few seconds."""

import time

import pytest


@pytest.mark.parametrize("n", range(20))
def test_takes_a_while(n):
    time.sleep(0.2)
    assert n != 7, "planted failure"
