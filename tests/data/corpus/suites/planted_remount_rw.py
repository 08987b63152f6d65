# attacks: remounts / read-write from inside, then deletes the file
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    subprocess.run(['mount', '-o', 'remount,rw', '/'], check=True)
    VICTIM.unlink()
