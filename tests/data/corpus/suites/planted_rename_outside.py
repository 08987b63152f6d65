# attacks: moves a file outside its folder away
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    VICTIM.rename(VICTIM.with_name('moved'))
