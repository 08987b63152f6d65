# attacks: ends the interpreter with status 0 while pytest imports it
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

os._exit(0)
