"""Corpus case: a test that starts a daemon (double fork, setsid) and hangs, so that verify is
killed while both run."""

import os
import sys
import time


def test_starts_a_daemon_and_hangs():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "corpus-daemon"])
        os._exit(0)
    time.sleep(600)
