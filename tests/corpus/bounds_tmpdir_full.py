"""Corpus case: a test that fills its $TMPDIR (the file system verify's own work folder is on)
and then prints, so that verify's log of the suite has no room left."""

import os
import tempfile


def test_fills_tmpdir_then_prints():
    chunk = b"x" * (1 << 16)
    with tempfile.NamedTemporaryFile(delete=False) as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError:
            pass
    for _ in range(200):
        print("y" * 1000)
    assert False, "fails, so that verify reruns it with the disk still full"
