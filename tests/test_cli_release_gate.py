"""A verification whose test gate did not run is "not run" in the release notes, never "pass"."""

from __future__ import annotations

import json
from pathlib import Path

from trainstack.release.results import NOT_RUN, parse_verify


def _verify_json(**fields) -> str:
    return json.dumps({"verdict": "pass", "reasons": [], "skipped": [], "gate": None, **fields})


def test_pass_with_the_suites_skipped_is_not_run() -> None:
    got = parse_verify(_verify_json(skipped=["suites"]), "flav", Path("flav/verify.json"), "flav/verify.json")
    assert got.verdict == NOT_RUN == "not run" and got.tests_run is None
    assert got.reasons == ["the test suites were skipped (verify --skip suites): no test gate ran"]


def test_a_failure_stays_a_failure_and_a_full_run_a_pass() -> None:
    failed = parse_verify(_verify_json(verdict="fail", reasons=["smoke: matmul"], skipped=["suites"]), "f", Path("v"), "v")
    assert failed.verdict == "fail" and failed.reasons == ["smoke: matmul"]
    gate = {"suites": [{"tests": 12, "failed": [], "known": []}], "total_failed": 0}
    passed = parse_verify(_verify_json(skipped=["ops"], gate=gate), "f", Path("v"), "v")
    assert passed.verdict == "pass" and passed.tests_run == 12
