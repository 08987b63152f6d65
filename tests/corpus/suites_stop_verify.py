"""Corpus case: a test that stops every process it can find (verify among them, were it visible)
and then hangs. Its suite's timeout must still hold."""

import os
import signal
import time


def test_stops_verify_then_hangs():
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (me, 1):
            try:
                os.kill(int(entry), signal.SIGSTOP)
            except OSError:
                pass
    for pid in (os.getppid(), 1):
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    time.sleep(300)
