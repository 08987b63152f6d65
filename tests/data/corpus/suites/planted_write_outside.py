# attacks: writes a new file beside a file outside its folder
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    (VICTIM.parent / 'INJECTED').write_text('x')
