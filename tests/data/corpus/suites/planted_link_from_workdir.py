# attacks: plants a link in its own writable folder and writes through it to a file outside
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    link = Path(os.environ['TMPDIR']) / 'link'
    link.symlink_to(VICTIM)
    link.write_text('INJECTED')
