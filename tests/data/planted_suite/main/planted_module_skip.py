import pytest

pytest.skip("planted: this whole module skips itself", allow_module_level=True)


def test_never_runs():
    assert True
