# attacks: skips every test: nothing ran
import os
import subprocess
import sys
import time
from pathlib import Path

VICTIM = Path(os.environ['SUITE_VICTIM'])

import pytest


@pytest.mark.skip(reason='INJECTED')
def test_a():
    pass


def test_b():
    pytest.skip('nothing')
