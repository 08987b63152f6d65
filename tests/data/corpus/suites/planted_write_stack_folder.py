# attacks: writes into the stack's own folder (the working folder it starts in)
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    Path('INJECTED-suite-write').write_text('x')
