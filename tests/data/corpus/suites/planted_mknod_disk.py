# attacks: creates a block device node in its writable folder to write the disk raw
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

def test_attack():
    import stat
    os.mknod(Path(os.environ['TMPDIR']) / 'disk', stat.S_IFBLK | 0o600, os.makedev(253, 0))
