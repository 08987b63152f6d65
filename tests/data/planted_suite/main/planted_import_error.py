import planted_module_that_does_not_exist  # noqa: F401 - the planted collection error


def test_never_collected():
    assert True
