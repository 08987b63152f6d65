"""release.html in a real headless Chromium: no console errors, version table and chart on screen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser import browser  # noqa: F401 (browser: fixture)
from tests.release_pair import release, slug_of

SIZES = {"laptop": (1366, 900), "phone": (390, 844)}

# Rendering fixtures for the page (not measurements), in the shape `trainstack bench --out` writes.
SETUP = {"model": "tiny", "batch": 2, "seq": 256, "world_size": 1}
CURRENT = [
    {**SETUP, "mode": "eager", "status": "ok", "tokens_per_s_per_gpu": 812.5, "mfu": None, "mem_allocated_gib": None},
    {**SETUP, "mode": "compile", "status": "ok", "tokens_per_s_per_gpu": 990.0, "mfu": None, "mem_allocated_gib": None},
    {**SETUP, "mode": "ac-planned", "status": "unavailable", "error": "needs a GPU"},
]
PREVIOUS = [{**SETUP, "mode": "eager", "status": "ok", "tokens_per_s_per_gpu": 790.0}]


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))




@pytest.mark.slow
@pytest.mark.timeout(120)
def test_page_loads_cleanly_and_shows_the_version_table_and_a_chart(project, browser, tmp_path):
    from selenium.webdriver.common.by import By

    slug = slug_of(project)
    _jsonl(project / "results" / slug / "bench.jsonl", CURRENT)
    _jsonl(project / "previous-results" / slug / "bench.jsonl", PREVIOUS)
    (project / "changes" / "12.known-issue.md").write_text("See [the tracker](https://example.org/issues/12).\n")
    release(project, previous_results=project / "previous-results")
    page = (project / "out" / "release.html").resolve()

    for name, (width, height) in SIZES.items():
        browser.set_window_size(width, height)
        browser.get(page.as_uri())
        errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert errors == [], f"{name}: console errors {errors}"
        table = browser.find_element(By.ID, "versions")
        chart = browser.find_element(By.CSS_SELECTOR, "img.chart")
        for element in (table, chart):
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
            assert element.is_displayed()
            assert element.size["width"] > 0 and element.size["height"] > 0
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", chart) > 0
        assert "numpy" in table.text
        # nothing wider than the screen but the tables, which scroll inside their own box
        overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name}: the page is {overflow}px wider than the window"
        # a full-page screenshot: the window as tall as the page, so table and chart are both in it
        full = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(width, full + 200)
        bottoms = [browser.execute_script("const r = arguments[0].getBoundingClientRect(); return r.bottom + scrollY", e)
                   for e in (table, chart)]
        assert all(bottom <= full for bottom in bottoms)
        shot = tmp_path / f"release-{name}.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 0
    assert browser.find_element(By.CSS_SELECTOR, "#known-issues a").get_attribute("href") == "https://example.org/issues/12"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_javascript_link_is_never_clickable_in_the_page(project, browser, tmp_path):
    """Validation refuses javascript: links (rule sources, known issues, fragments); here the notes are
    made with them anyway, past validation, and the page still holds no link that runs a script."""
    from selenium.webdriver.common.by import By

    from trainstack.release.html import render_html
    from trainstack.release.markdown import render_markdown
    from trainstack.release.schema import DriverRequirement, Fragment, KnownIssue

    notes = release(project).notes
    script = "javascript:window.__pwned='{}'//"
    hostile = notes.model_copy(update={
        "drivers": [DriverRequirement(slug=slug_of(project), cuda="12.8", min_driver="570.26", note="CUDA 12.8",
                                      source=script.format("driver"))],
        "verification": [v.model_copy(update={"known_issues": [KnownIssue(title="flaky", link=script.format("known"))]})
                         for v in notes.verification],
        "fragments": [Fragment(name="1.fix.md", type="fix", text=f"See [the fix]({script.format('fragment')}).")],
    })
    assert "javascript:" not in render_markdown(hostile).replace("(javascript:", "")  # shown as text, never a target
    page = tmp_path / "release.html"
    page.write_text(render_html(hostile, []))
    browser.get(page.as_uri())
    anchors = browser.find_elements(By.TAG_NAME, "a")
    hrefs = [(a.get_attribute("href") or "").strip().lower() for a in anchors]
    assert hrefs and not [href for href in hrefs if href.startswith("javascript:")]
    for anchor in anchors:
        if not (anchor.get_attribute("href") or "").startswith(("http://", "https://")):  # stay on the page
            browser.execute_script("arguments[0].click()", anchor)
    assert browser.execute_script("return window.__pwned === undefined")
    assert "rules source" not in [a.text for a in anchors]  # the driver's source is shown as text, not a link
