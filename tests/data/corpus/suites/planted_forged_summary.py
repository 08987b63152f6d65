# attacks: prints a forged pytest summary line claiming success, then fails
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    print('\n===== 40 passed in 0.01s =====')
    sys.stdout.flush()
    assert False
