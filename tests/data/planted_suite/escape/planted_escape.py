import os
import time
from pathlib import Path


def test_leaves_its_session_and_holds_the_pipes():
    """A grandchild that calls setsid() leaves the suite's process group and keeps its stdout and stderr open."""
    state = Path(os.environ["PLANTED_STATE"])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            (state / "escaped.pid").write_text(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
    time.sleep(600)


def test_finishes_but_leaves_a_daemon():
    """Passes at once; the daemon it left (its own session, the pipes held) must not keep verify waiting."""
    state = Path(os.environ["PLANTED_STATE"])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            (state / "daemon.pid").write_text(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
    while not (state / "daemon.pid").exists():
        time.sleep(0.01)
