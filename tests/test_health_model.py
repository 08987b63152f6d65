"""Status combination, exit codes and the JSON schema of the health report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainstack.health.schema import Check, HealthReport, Status, worst

RESULTS = Path(__file__).parent / "data" / "recorded" / "health_h200"
SCHEMA = Path(__file__).parent / "data" / "health" / "report.schema.json"


def _check(status: Status) -> Check:
    return Check(name="x", level=1, status=status)


@pytest.mark.parametrize(
    ("statuses", "expected", "code"),
    [
        ([], Status.ok, 0),
        ([Status.ok, Status.ok], Status.ok, 0),
        ([Status.ok, Status.warn], Status.warn, 1),
        ([Status.warn, Status.critical, Status.ok], Status.critical, 2),
        ([Status.ok, Status.unknown], Status.unknown, 3),
        # unknown outranks warn: health not established is worse than a known tolerable defect
        ([Status.warn, Status.unknown], Status.unknown, 3),
        # critical outranks unknown: a known failure is the stronger statement
        ([Status.unknown, Status.critical], Status.critical, 2),
    ],
)
def test_worst_status_wins_and_maps_to_nagios_exit_codes(statuses, expected, code):
    assert worst(statuses) is expected
    report = HealthReport.build(level=1, checks=[_check(s) for s in statuses], gpu_model=None,
                                profile="default", seconds=0.0)
    assert report.status is expected
    assert report.exit_code == code


def test_schema_is_stable():
    """The JSON schema is an interface: a change must be deliberate (update the file with it)."""
    assert HealthReport.model_json_schema() == json.loads(SCHEMA.read_text())


@pytest.mark.parametrize("name", ["health_h200_level1.json", "health_h200_level2.json", "health_h200_level3.json"])
def test_recorded_h200_reports_follow_the_schema(name):
    import jsonschema  # a test dependency: these checks always run
    data = json.loads((RESULTS / name).read_text())
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    report = HealthReport.model_validate(data)
    assert report.gpu_model == "NVIDIA H200"
    assert report.exit_code == report.status.exit_code


def test_unknown_fields_are_rejected():
    with pytest.raises(ValueError):
        Check.model_validate({"name": "x", "level": 1, "status": "ok", "colour": "red"})
