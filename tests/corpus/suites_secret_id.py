"""Corpus case: a credential of verify's environment carried by a test id, a parameter, a
failure message, the suite's output and its log."""

import os

import pytest

TOKEN = os.environ.get("CORPUS_SECRET_TOKEN", "absent")


@pytest.mark.parametrize("value", [TOKEN], ids=[TOKEN])
def test_x(value):
    print(f"stdout line with {value}")
    raise AssertionError(f"failure message with {value}")


@pytest.mark.parametrize("pair", [(TOKEN, 1)])
def test_y(pair):
    assert pair[1] == 2, f"parameter {pair[0]}"
