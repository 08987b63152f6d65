# attacks: writes a dotfile into the user's home
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    (Path(os.environ['SUITE_REAL_HOME']) / '.INJECTED-profile').write_text('x')
