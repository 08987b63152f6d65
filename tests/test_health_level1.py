"""Level 1 on recorded NVML answers: a real H200 recording, and that recording with one fact changed.

The recording (data/health/nvml_h200.json) was made on one H200 by
benchmarks/health_h200.sh. The multi-GPU NVLink answers are not recorded: those
cases are built from nvml.h (nvmlDeviceGetNvLinkState answers NVML_FEATURE_ENABLED
= 1 or DISABLED = 0 per link).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from trainstack.health.host import Space
from trainstack.health.level1 import Expectations, host_checks, node_checks
from trainstack.health.schema import Status, worst
from trainstack.health.nvml import RecordedSource, decode_reasons, parse_node
from trainstack.health.thresholds import load_thresholds

RECORDING = Path(__file__).parent / "data" / "health" / "nvml_h200.json"


@pytest.fixture
def raw():
    return json.loads(RECORDING.read_text())


def _run(raw, **expect):
    node = parse_node(raw)
    t = load_thresholds(node.gpus[0].name if node.gpus else None)
    return {(c.name, c.gpu): c for c in node_checks(node, t, Expectations(**expect))}


def test_recorded_h200_parses(raw):
    node = parse_node(raw)
    g = node.gpus[0]
    assert node.driver_version == "580.159.04" and node.cuda_driver_version == 13000
    assert g.name == "NVIDIA H200" and g.persistence_mode == 1
    assert (g.ecc_current, g.ecc_pending) == (1, 1)
    assert (g.remapped_correctable, g.remapped_uncorrectable, g.remap_pending, g.remap_failure) == (0, 0, False, False)
    assert g.retired_pages is None and "NotSupported" in g.unavailable["retired_pages_sbe"]
    assert g.nvlink_up is None or g.nvlink_up + g.nvlink_down == 0  # one GPU in a VM: no link answers
    assert g.power_limit_w == 700.0


def test_recorded_h200_is_healthy(raw):
    checks = _run(raw, runtime_cuda="13.0")
    assert worst([c.status for c in checks.values()]) is Status.ok, [c for c in checks.values() if c.status is not Status.ok]
    assert checks[("retired_pages", 0)].message.startswith("not used")
    assert checks[("driver.cuda", None)].value == "13.0"


@pytest.mark.parametrize(
    ("path", "value", "name", "status"),
    [
        (("persistence_mode",), 0, "persistence_mode", Status.warn),
        (("ecc_mode",), [0, 0], "ecc.mode", Status.warn),
        (("ecc_volatile_uncorrected",), 2, "ecc.volatile_uncorrected", Status.critical),
        (("ecc_aggregate_uncorrected",), 1, "ecc.aggregate_uncorrected", Status.warn),
        (("ecc_volatile_corrected",), 20000, "ecc.volatile_corrected", Status.warn),
        (("remapped_rows",), [3, 1, 1, 0], "rows.remap_state", Status.warn),
        (("remapped_rows",), [0, 2, 0, 1], "rows.remap_state", Status.critical),
        (("remapped_rows",), [0, 9, 0, 0], "rows.remapped_uncorrectable", Status.warn),
        (("clocks_event_reasons",), 0x8, "clocks.events", Status.critical),
        (("clocks_event_reasons",), 0x20 | 0x1, "clocks.events", Status.warn),
        (("clocks_event_reasons",), 0x4, "clocks.events", Status.ok),
        (("temperature_c",), 93, "temperature", Status.critical),
        (("max_clock_sm_mhz",), 1755, "clocks.sm_max", Status.warn),
        (("ecc_volatile_uncorrected",), {"error": "NVMLError_Unknown: Unknown Error"}, "ecc.volatile_uncorrected",
         Status.unknown),
    ],
)
def test_one_bad_fact_gives_its_verdict(raw, path, value, name, status):
    bad = copy.deepcopy(raw)
    bad["gpus"][0][path[0]] = value
    check = _run(bad)[(name, 0)]
    assert check.status is status, check


def test_gpu_count_against_expected(raw):
    assert _run(raw, gpus=1)[("gpu.count", None)].status is Status.ok
    missing = _run(raw, gpus=8)[("gpu.count", None)]
    assert (missing.status, missing.value, missing.threshold) == (Status.critical, 1, "== 8")
    assert _run(raw, gpus=0)[("gpu.count", None)].status is Status.warn
    empty = copy.deepcopy(raw)
    empty["gpus"] = []
    assert _run(empty)[("gpu.count", None)].status is Status.critical


def test_driver_against_minimum(raw):
    assert _run(raw, min_driver="570.86.15")[("driver.version", None)].status is Status.ok
    low = _run(raw, min_driver="590.10", min_driver_source="from --min-driver")[("driver.version", None)]
    assert (low.status, low.threshold, low.message) == (Status.critical, ">= 590.10", "from --min-driver")
    assert _run(raw)[("driver.version", None)].message == "no minimum known: pass --min-driver"


def test_driver_cuda_against_torch_build(raw):
    assert _run(raw, runtime_cuda="12.8")[("driver.cuda", None)].status is Status.ok
    assert _run(raw, runtime_cuda="14.0")[("driver.cuda", None)].status is Status.critical


def _two_gpus(raw, links0, links1):
    two = copy.deepcopy(raw)
    second = copy.deepcopy(two["gpus"][0])
    second["index"] = 1
    two["gpus"].append(second)
    for gpu, links in zip(two["gpus"], (links0, links1)):
        gpu["nvlink_state"] = links + [{"error": "NVMLError_InvalidArgument: Invalid Argument"}] * (18 - len(links))
    return two


def test_nvlink_down_on_a_multi_gpu_node_is_critical(raw):
    checks = _run(_two_gpus(raw, [1] * 18, [1] * 16 + [0, 0]))
    assert checks[("nvlink.links_up", 0)].status is Status.ok
    down = checks[("nvlink.links_up", 1)]
    assert (down.status, down.value, down.threshold) == (Status.critical, 16, ">= 18")


def test_nvlink_silent_on_a_multi_gpu_node_is_unknown(raw):
    nvlink_error = {"error": "NVMLError_NotSupported: Not Supported"}
    checks = _run(_two_gpus(raw, [nvlink_error], [nvlink_error]))
    assert checks[("nvlink.links_up", 1)].status is Status.unknown


def test_clock_reason_names():
    assert decode_reasons(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert decode_reasons(0) == []


def test_host_checks_limits():
    t = load_thresholds(None)
    docker_default = Space("/dev/shm", 64 / 1024)
    checks = host_checks(docker_default, Space(".", 5.0), t)
    assert [c.status for c in checks] == [Status.critical, Status.critical]
    unreadable = host_checks(Space("/dev/shm", None, "cannot stat /dev/shm: No such file or directory"),
                             Space(".", 100.0), t)
    assert unreadable[0].status is Status.unknown and "cannot stat" in unreadable[0].message


def test_recorded_source_samples_the_recorded_gpu(raw):
    s = RecordedSource(raw).sample(0)
    assert set(s) == {"clock_sm_mhz", "clocks_event_reasons", "temperature_c"}
