"""Corpus case: tests that replace the progress events file verify reads while the suite runs (it
lies in the suite's own work folder) with a sparse file of a gibibyte, then with a FIFO no one
writes to. Each is judged by verify's bounds, not by these tests, which pass."""

import os


def test_a_sparse_gibibyte_of_events():
    path = os.environ["TRAINSTACK_PROGRESS"]
    with open(path + ".big", "wb") as fh:
        fh.truncate(1 << 30)  # no line break in it: one line of a gibibyte
    os.replace(path + ".big", path)


def test_then_a_fifo_with_no_writer():
    path = os.environ["TRAINSTACK_PROGRESS"]
    os.mkfifo(path + ".fifo")
    os.replace(path + ".fifo", path)  # the plugin's next event waits on it: the suite ends at its timeout
