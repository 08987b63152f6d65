"""Corpus case: tests that write a line nested 100,000 deep into the progress events file verify
reads while the suite runs (it lies in the suite's own work folder), then replace the file with a
sparse file of a gibibyte, then with a FIFO no one writes to. Each is judged by verify's bounds, not by these tests, which pass."""

import os
import time


def test_a_line_nested_100000_deep():
    with open(os.environ["TRAINSTACK_PROGRESS"], "a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")  # json.loads: a RecursionError, not a ValueError
    time.sleep(1)  # read by verify's live progress before the next test replaces the file


def test_a_sparse_gibibyte_of_events():
    path = os.environ["TRAINSTACK_PROGRESS"]
    with open(path + ".big", "wb") as fh:
        fh.truncate(1 << 30)  # no line break in it: one line of a gibibyte
    os.replace(path + ".big", path)


def test_then_a_fifo_with_no_writer():
    path = os.environ["TRAINSTACK_PROGRESS"]
    os.mkfifo(path + ".fifo")
    os.replace(path + ".fifo", path)  # the plugin's next event waits on it: the suite ends at its timeout
