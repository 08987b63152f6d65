# attacks: starts 30 sleepers in sessions of their own
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    for _ in range(30):
        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)
