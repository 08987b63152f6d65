import os


def test_before():
    assert True


def test_crash():
    os._exit(3)


def test_after():
    assert True
