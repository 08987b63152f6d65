# attacks: appends forged progress events that report 50 passes
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

import json


def test_attack():
    with open(os.environ['TRAINSTACK_PROGRESS'], 'a') as fh:
        for i in range(50):
            fh.write(json.dumps({'event': 'report', 'nodeid': f'x{i}', 'when': 'call', 'outcome': 'passed'}) + '\n')
    assert False
