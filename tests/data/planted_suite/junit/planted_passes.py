def test_passes():
    assert True
