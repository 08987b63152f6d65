"""Corpus case: a failing test that replaces its suite's log with a link to a file outside, so
that the rerun of the failures would append through it."""

import os
from pathlib import Path


def _logs():
    home = Path(os.environ["HOME"])  # the suite's own work folder holds $HOME
    name = os.environ["CORPUS_SUITE"]
    return [home.parent / f"{name}.log", home.parents[1] / "logs" / f"{name}.log"]


def test_replaces_its_log_with_a_link():
    victim = os.environ["CORPUS_VICTIM"]
    for log in _logs():
        try:
            log.unlink()
        except OSError:
            pass
        try:
            log.symlink_to(victim)
        except OSError:
            pass
    print("planted log line: appended through the link?")
    assert False, "fails, so that verify reruns it"
