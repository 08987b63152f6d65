"""health --prolog's verdict and reason line, and health --fleet DIR: the fleet report from the
JSON nodes wrote (the recorded H200 level-2 report as every node's), its outliers against the
fleet's own median, its HTML page escaped, its schema stable, and every bad file one error line
naming it (exit 64, health's bad input)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainstack.cli import main
from trainstack.health.fleet import fleet_report
from trainstack.health.fleet_schema import FleetReport
from trainstack.health.reason import prolog_exit, reason_line
from trainstack.health.schema import Check, HealthReport, Status, worst

H200 = Path(__file__).parent / "data" / "recorded" / "health_h200" / "health_h200_level2.json"
SCHEMA = Path(__file__).parent / "data" / "health" / "fleet.schema.json"


def _c(name: str, status: Status, gpu: int | None = None) -> Check:
    return Check(name=name, level=1, status=status, gpu=gpu)


def test_the_reason_names_the_worst_check_in_short_stable_words() -> None:
    checks = [_c("host.shm_size", Status.ok), _c("temperature", Status.warn, 1),
              _c("ecc.volatile_uncorrected", Status.critical, 3), _c("clocks.events", Status.unknown, 0)]
    assert reason_line(checks) == "trainstack: gpu3 ECC uncorrected +1 more"
    assert reason_line(checks[:2]) == ""  # a warning passes a prolog
    assert reason_line([_c("clocks.events", Status.unknown, 0)]) == "trainstack: gpu0 clock slowdown unknown"
    assert [prolog_exit(s) for s in Status] == [0, 0, 0, 1, 1]  # skip, ok, warn, critical, unknown


def test_skip_passes_and_never_hides_a_result() -> None:
    assert worst([Status.skip, Status.skip]) is Status.skip and Status.skip.exit_code == 0
    assert worst([Status.skip, Status.ok]) is Status.ok
    assert worst([Status.skip, Status.warn]) is Status.warn


def test_prolog_on_a_node_without_gpu_skips_gpu_checks_and_passes(tmp_path: Path, capsys) -> None:
    out = tmp_path / "nodes"
    assert main(["health", "--prolog", "--node-out", str(out)]) == 0
    (written,) = out.iterdir()
    report = HealthReport.model_validate_json(written.read_text())
    assert report.mode == "prolog" and report.exit_code == 0 and report.reason == ""
    gpu = [c for c in report.checks if c.name in ("gpu.count", "driver.version")]
    assert [(c.status, c.message) for c in gpu] == [(Status.skip, "skip: no GPU")] * 2
    # a warning (a busy CI host's load, say) still passes a prolog: Slurm's exit 0
    assert capsys.readouterr().out.strip() in (f"trainstack: {report.node} passes (ok)",
                                               f"trainstack: {report.node} passes (warn)")


def _node(tmp: Path, name: str, scale: float = 1.0, *, reason: str = "", status: str | None = None) -> None:
    data = json.loads(H200.read_text())
    data["node"] = name
    for c in data["checks"]:
        if c["name"] in ("gemm.bf16", "copy.device", "copy.h2d") and isinstance(c["value"], (int, float)):
            c["value"] *= scale
    if reason:
        data.update(reason=reason, status=status, mode="prolog", exit_code=1)
    (tmp / f"{name}.json").write_text(json.dumps(data))


def test_a_node_ten_percent_below_the_fleet_median_is_named_though_it_passes(tmp_path: Path) -> None:
    for name in ("a1", "a2", "a3", "a4"):
        _node(tmp_path, name)
    _node(tmp_path, "b1", 0.85)  # passes its thresholds, slower than its peers
    _node(tmp_path, "c1", reason="trainstack: gpu3 ECC uncorrected", status="critical")
    assert main(["health", "--fleet", str(tmp_path), "--output", str(tmp_path / "out" / "fleet.json"),
                 "--html", str(tmp_path / "out" / "fleet.html")]) == 1
    report = FleetReport.model_validate_json((tmp_path / "out" / "fleet.json").read_text())
    assert {(o.node, o.metric) for o in report.outliers} == {("b1", "gemm_tflops"), ("b1", "hbm_gbps"), ("b1", "h2d_gbps")}
    assert all(o.ratio == pytest.approx(0.85) for o in report.outliers)
    assert report.failing == ["c1"]
    assert next(n for n in report.nodes if n.node == "c1").reason == "trainstack: gpu3 ECC uncorrected"
    # a fleet of equals has nothing to say
    (tmp_path / "b1.json").unlink()
    (tmp_path / "c1.json").unlink()
    reports = [(p.name, HealthReport.model_validate_json(p.read_text())) for p in sorted(tmp_path.glob("*.json"))]
    assert fleet_report(reports, None).outliers == []


def test_the_fleet_page_escapes_what_nodes_wrote(tmp_path: Path) -> None:
    _node(tmp_path, "a1")
    _node(tmp_path, "a2", reason="trainstack: <script>alert(1)</script>", status="critical")
    main(["health", "--fleet", str(tmp_path / "."), "--html", str(tmp_path / "page" / "fleet.html")])
    page = (tmp_path / "page" / "fleet.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_node_pair_below_ninety_percent_of_the_nodes_best_pairs_is_slow() -> None:
    from trainstack.health.allreduce_pairs import mark_slow
    from trainstack.health.fleet_schema import PairRow

    nodes = ["n1", "n2", "n3", "n4", "n5"]
    pairs = [{"nodes": [a, b], "bytes": 1 << 30, "busbw_gbps": 40.0 if "n4" in (a, b) else 180.0}
             for i, a in enumerate(nodes) for b in nodes[i + 1:]]
    marked = [PairRow.model_validate(p) for p in mark_slow(pairs)]
    assert {tuple(p.nodes) for p in marked if p.slow} == {("n1", "n4"), ("n2", "n4"), ("n3", "n4"), ("n4", "n5")}
    assert mark_slow(pairs[:1])[0]["slow"] is False  # one pair has no peers to be slower than


def _sweep(pairs: dict[tuple[str, str], float]) -> dict:
    from trainstack.health.allreduce_pairs import mark_slow

    nodes = sorted({n for pair in pairs for n in pair})
    return {"kind": "allreduce", "schema_version": 1, "backend": "gloo", "world_size": len(nodes), "nodes": nodes,
            "ranks": nodes, "sizes": [],
            "pairs": mark_slow([{"nodes": list(k), "bytes": 1 << 20, "busbw_gbps": v} for k, v in pairs.items()])}


def test_among_three_nodes_the_slow_one_is_named_by_its_pairs(tmp_path: Path) -> None:
    # n3's two pairs are slow, two of the three: the pairs' own median would be a slow one
    sweep = _sweep({("n1", "n2"): 2.0, ("n1", "n3"): 0.5, ("n2", "n3"): 0.55})
    assert [(p["nodes"], p["slow"]) for p in sweep["pairs"]] == [
        (["n1", "n2"], False), (["n1", "n3"], True), (["n2", "n3"], True)]
    for name in ("n1", "n2", "n3"):
        _node(tmp_path, name)
    (tmp_path / "allreduce.json").write_text(json.dumps(sweep))
    assert main(["health", "--fleet", str(tmp_path), "--output", str(tmp_path / "out" / "fleet.json")]) == 1
    report = FleetReport.model_validate_json((tmp_path / "out" / "fleet.json").read_text())
    assert [(o.node, o.metric) for o in report.outliers] == [("n3", "allreduce_busbw_gbps")]
    assert {n.node: n.allreduce_busbw_gbps for n in report.nodes} == {"n1": 2.0, "n2": 2.0, "n3": 0.55}
    # one slow link between two good nodes: that pair, and no node
    sweep = _sweep({("n1", "n2"): 0.5, ("n1", "n3"): 2.0, ("n2", "n3"): 2.1})
    assert [p["nodes"] for p in sweep["pairs"] if p["slow"]] == [["n1", "n2"]]
    (tmp_path / "allreduce.json").write_text(json.dumps(sweep))
    assert main(["health", "--fleet", str(tmp_path), "--output", str(tmp_path / "out" / "fleet.json")]) == 1
    report = FleetReport.model_validate_json((tmp_path / "out" / "fleet.json").read_text())
    assert report.outliers == [] and report.allreduce is not None
    assert [p.nodes for p in report.allreduce.pairs if p.slow] == [["n1", "n2"]]


def test_fleet_schema_is_stable() -> None:
    assert FleetReport.model_json_schema() == json.loads(SCHEMA.read_text())


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("n1.json", b"{not json", "n1.json: not JSON (line 1: Expecting property name"),
        ("n1.json", b"\xff\xfe", "n1.json: not UTF-8 text"),
        ("n1.json", json.dumps({"level": 9}).encode(), "n1.json: level: Input should be less than or equal to 3"),
        ("n1.json", b"[" * 100000 + b"]" * 100000, "n1.json: not JSON (nested too deep)"),
        ("n1.json", b" " * (5 << 20), "n1.json: cannot read: is larger than 4 MiB"),
        ("sweep.json", json.dumps({"kind": "allreduce", "schema_version": 1, "backend": "gloo", "world_size": 2,
                                   "nodes": ["a; rm -rf /"], "ranks": [], "sizes": [], "pairs": []}).encode(),
         "sweep.json: nodes.0: String should match pattern"),
    ],
)
def test_a_bad_file_is_one_error_line_naming_it(tmp_path: Path, capsys, name: str, content: bytes, expected: str) -> None:
    _node(tmp_path, "a0")
    (tmp_path / name).write_bytes(content)
    assert main(["health", "--fleet", str(tmp_path)]) == 64
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"error: {tmp_path / name}: ") and expected in err[0], err


def test_a_link_a_duplicate_node_and_an_empty_folder_are_refused(tmp_path: Path, capsys) -> None:
    _node(tmp_path, "a1")
    os.symlink(H200, tmp_path / "elsewhere.json")
    assert main(["health", "--fleet", str(tmp_path)]) == 64
    assert "elsewhere.json: cannot read" in capsys.readouterr().err
    (tmp_path / "elsewhere.json").unlink()
    (tmp_path / "copy.json").write_text((tmp_path / "a1.json").read_text())
    assert main(["health", "--fleet", str(tmp_path)]) == 64
    assert "node a1 reported twice" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["health", "--fleet", str(empty)]) == 64
    assert "no node report" in capsys.readouterr().err
