# attacks: leaves a daemon (setsid, double fork) that deletes the file after verify has finished
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(4)
            try:
                VICTIM.unlink()
            finally:
                os._exit(0)
        os._exit(0)
