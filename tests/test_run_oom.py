"""The OOM view and diagnosis from a snapshot recorded on an H200 (a planted OOM of
tests/data/run/llama_loop.py under `trainstack run --oom-snapshot`, benchmarks/run_h200.py),
and the HTML page in a real headless Chromium."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pytest

from tests.browser import browser  # noqa: F401  (a fixture)
from trainstack.run import diagnosis, memview
from trainstack.run.oom import diagnose_with

SNAPSHOT = Path(__file__).parent / "data" / "run" / "oom-h200.pickle.gz"
GiB = 2**30


@pytest.fixture(scope="module")
def snapshot() -> dict:
    return pickle.loads(gzip.decompress(SNAPSHOT.read_bytes()))


def test_the_summary_of_a_real_oom(snapshot):
    summary = memview.summarize(snapshot)
    assert summary.requested is not None and summary.requested > 0  # the allocator's OOM event
    assert 0 < summary.allocated <= summary.reserved
    assert summary.events > 100
    assert summary.timeline[-1][1] == summary.allocated  # the timeline ends at the live total
    assert max(b for _, b in summary.timeline) >= summary.allocated
    assert summary.stacks == sorted(summary.stacks, key=lambda s: -s.total)
    assert sum(s.total for s in summary.stacks) <= summary.allocated
    # where in the job: the model's code and the job's own file, not torch's internals
    frames = [frame for s in summary.stacks for frame in s.frames]
    assert any("transformers/models/llama/modeling_llama.py" in f for f in frames)
    assert any(f.startswith("tests/test_run_data/llama_loop.py:") for f in frames)  # where the job was when the snapshot was recorded
    assert not any("site-packages/torch/" in f for f in frames)


def test_torch_frames_are_left_out_even_in_an_environment_under_a_folder_named_torch():
    frames = [
        {"filename": "/srv/torch/env/lib/python3.12/site-packages/torch/nn/functional.py", "line": 1, "name": "linear"},
        {"filename": "/srv/torch/env/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py", "line": 2, "name": "forward"},
        {"filename": "/home/me/train.py", "line": 3, "name": "step"},
    ]
    assert memview._user_frames(frames) == (
        "/srv/torch/env/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py:2 forward",
        "/home/me/train.py:3 step",
    )


def test_the_diagnosis_paragraph_without_the_model(snapshot):
    summary = memview.summarize(snapshot)
    text = diagnose_with(summary, None, 20 * GiB)
    assert text.startswith(f"The job ran out of memory on cuda:{summary.device} asking for {memview.gib(summary.requested)}")
    assert "of 20.00 GiB it may use" in text
    assert text.endswith("memplan could not plan the model: the job's model was not seen (no module called in training mode).")
    assert diagnosis.suggest_budget(int(20.005 * GiB)) == "20.00GiB"


@pytest.mark.timeout(120)
def test_the_oom_page_opens_in_chromium_with_timeline_and_stacks(snapshot, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By

    summary = memview.summarize(snapshot)
    page = tmp_path / "oom.html"
    page.write_text(memview.render_html(summary, "a <diagnosis> & its budget", title="Out of memory, rank 0"))
    for width, height in ((1366, 900), (390, 844)):
        browser.set_window_size(width, height)
        browser.get(page.as_uri())
        errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert errors == []
        timeline = browser.find_element(By.ID, "timeline")
        assert timeline.is_displayed() and timeline.size["width"] > 300 and timeline.size["height"] > 50
        line = browser.find_element(By.CSS_SELECTOR, "#timeline polyline")
        assert len(line.get_attribute("points").split()) == len(summary.timeline)
        rows = browser.find_elements(By.CSS_SELECTOR, "#stacks tbody tr")
        assert len(rows) == len(summary.stacks) > 0
        assert browser.find_element(By.ID, "diagnosis").text == "a <diagnosis> & its budget"  # escaped, shown as text
