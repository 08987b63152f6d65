# attacks: overwrites a file outside its folder
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    VICTIM.write_text('INJECTED')
