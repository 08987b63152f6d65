"""Corpus case: tests that write /dev/shm and open /proc/sys/kernel/core_pattern for writing.
Each passes only where the sandbox kept the write away from the machine."""

import os
from pathlib import Path

import pytest


def test_dev_shm_is_private():
    mark = os.environ["CORPUS_MARK"]
    Path("/dev/shm", f"corpus-{mark}").write_text("planted\n")  # a private tmpfs takes it; the machine's must not


def test_core_pattern_cannot_be_opened_for_writing():
    with pytest.raises(OSError):
        os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))  # opened, never written


def test_no_other_kernel_knob_is_writable():
    for knob in ("/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"):
        if os.path.exists(knob):
            with pytest.raises(OSError):
                os.close(os.open(knob, os.O_WRONLY))
