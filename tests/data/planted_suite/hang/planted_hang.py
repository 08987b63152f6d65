import os
import subprocess
import sys
import time
from pathlib import Path


def test_hangs_with_a_child_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (Path(os.environ["PLANTED_STATE"]) / "child.pid").write_text(str(child.pid))
    time.sleep(600)
