import os
import time
from pathlib import Path


def _leave_a_daemon(pid_file: Path) -> None:
    """A grandchild in a session of its own (setsid, double fork), holding the suite's stdout and
    stderr, that writes its pid to ``pid_file`` and sleeps ten minutes."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            pid_file.write_text(str(os.getpid()))
            time.sleep(600)
        os._exit(0)


def test_leaves_its_session_and_holds_the_pipes():
    """A grandchild that calls setsid() leaves the suite's process group and keeps its stdout and stderr open."""
    _leave_a_daemon(Path(os.environ["PLANTED_STATE"]) / "escaped.pid")
    time.sleep(600)


def test_finishes_but_leaves_a_daemon():
    """Passes at once; the daemon it left (its own session, the pipes held) must not keep verify waiting."""
    pid_file = Path(os.environ["PLANTED_STATE"]) / "daemon.pid"
    _leave_a_daemon(pid_file)
    while not pid_file.exists():
        time.sleep(0.01)
