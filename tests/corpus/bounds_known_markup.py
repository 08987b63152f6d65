"""Corpus case (with bounds_known_markup.toml): a failing test that the known-issues file accepts."""


def test_known_markup():
    assert False, "accepted by bounds_known_markup.toml"
