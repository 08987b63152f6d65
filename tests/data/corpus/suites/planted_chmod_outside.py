# attacks: makes a file outside its folder world-writable
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    VICTIM.chmod(0o777)
