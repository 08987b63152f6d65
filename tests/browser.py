"""A real headless Chromium (Debian's chromium and chromium-driver) driven by selenium, for the tests
of the HTML pages trainstack writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def snap_only() -> bool:
    """Ubuntu: its archive has no chromium package, only chromium-browser, which installs the snap."""
    release = Path("/etc/os-release")
    fields = dict(line.split("=", 1) for line in release.read_text().splitlines() if "=" in line) if release.is_file() else {}
    return fields.get("ID", "").strip('"') == "ubuntu"


@pytest.fixture
def browser(tmp_path: Path):
    for program in (CHROMIUM, CHROMEDRIVER):
        if not Path(program).exists() and shutil.which(Path(program).name) is None:
            if snap_only():
                pytest.skip(f"skip: no {Path(program).name} (this system's archive ships Chromium only as a snap, which cannot run here)")
            pytest.fail(f"{program} is missing: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = CHROMEDRIVER if Path(CHROMEDRIVER).exists() else shutil.which("chromedriver")
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()
