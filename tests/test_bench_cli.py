"""The bench verb end to end on the CPU: ablation in fresh processes, planted OOM, JSON
lines and chart, A/B compare, FSDP2 under torchrun, and one-line errors for bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.clirun import assert_no_traceback
from tests.rank_launch import free_port
from trainstack.bench.ablation import run_ablation  # noqa: E402
from trainstack.nn.modes import parse_mode  # noqa: E402
from trainstack.nn.presets import PRESETS  # noqa: E402
from trainstack.bench.runner import RunSpec  # noqa: E402
from trainstack.cli import main  # noqa: E402

TINY = ["-m", "tiny", "--seq", "64", "--batch", "2", "--steps", "3", "--warmup", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    code = main(["bench", *TINY, "--ablation", "--modes", "eager,ac-full,ac-selective", "--out", str(out)])
    return code, out / "bench-tiny-b2-s64.jsonl", out / "bench-tiny-b2-s64.png"


def test_ablation_writes_json_lines_and_a_chart(ablation, capsys):
    code, jsonl, png = ablation
    assert code == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["mode"] for r in rows] == ["eager", "ac-full", "ac-selective"]
    for row in rows:
        assert row["status"] == "ok"
        assert row["tokens_per_s_per_gpu"] > 0
        assert row["mfu"] is None  # a CPU is not in the peak table: MFU unknown, never guessed
        assert row["step_ms_p10"] <= row["step_ms_median"] <= row["step_ms_p90"]
        assert row["loss_final"] == pytest.approx(rows[0]["loss_final"], rel=1e-5)  # same maths in every mode
        assert row["world_size"] == 1 and row["params_per_rank"] == PRESETS["tiny"].total_params()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(jsonl.parent.glob(".*.tmp"))


def test_profile_writes_a_trace_and_a_kernel_table(tmp_path, capfd):
    prof = tmp_path / "prof"
    assert main(["bench", *TINY, "--modes", "compile+ac-full", "--out", str(tmp_path), "--profile", str(prof)]) == 0
    row = json.loads((tmp_path / "bench-tiny-b2-s64.jsonl").read_text().splitlines()[0])
    trace, kernels = Path(row["profile"]["trace"]), Path(row["profile"]["kernels"])
    assert trace.parent == prof.resolve() and trace.name == "profile-tiny-compile_ac-full-b2-s64.trace.json"
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events)  # the step's matrix products were recorded
    table = kernels.read_text()
    assert "2 steps, sorted by self_cpu_time_total" in table and "aten::mm" in table
    written = capfd.readouterr()  # what reached the file descriptors, kineto's own writes included
    assert str(kernels) in written.out
    assert "profiler_start" not in written.err and "USDT:" not in written.err, written.err  # tests/test_bench_kineto.py
    assert row["timed_steps"] == 3  # profiled steps are extra, not timed
    assert not list(prof.glob(".*.tmp"))


def test_planted_oom_is_a_row_and_the_run_goes_on():
    base = RunSpec("tiny", PRESETS["tiny"], batch=2, seq=64, steps=2, warmup=1, device="cpu")
    # 256 MiB of address space beyond what the worker has mapped; 125m's fp32 weights alone need 475 MiB
    planted = RunSpec("125m", PRESETS["125m"], batch=2, seq=64, steps=2, warmup=1, device="cpu", memory_cap_bytes=256 * 2**20)
    rows = run_ablation([planted, base])
    assert [r["status"] for r in rows] == ["oom", "ok"]
    assert "can't allocate memory" in rows[0]["error"]
    assert [r["memory_cap_gib"] for r in rows] == [0.25, None]  # the cap a row ran under is in the row


def test_compare_prints_ratios(ablation, tmp_path, capsys):
    _, a, _ = ablation
    assert main(["bench", *TINY, "--modes", "ac-full", "--out", str(tmp_path)]) == 0
    b = tmp_path / "bench-tiny-b2-s64.jsonl"
    capsys.readouterr()
    assert main(["bench", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "B/A" in out
    ac_full = next(line for line in out.splitlines() if "ac-full" in line)
    assert "x)" in ac_full  # a ratio: both sides measured
    eager = next(line for line in out.splitlines() if "eager" in line)
    assert "absent" in eager


def test_unknown_gpu_shows_mfu_unknown(ablation, capsys):
    _, a, _ = ablation
    assert main(["bench", "--compare", str(a), str(a)]) == 0
    assert "unknown" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-m", "70b"], "--preset: unknown preset '70b'; accepted: tiny, 125m, 1b, 3b, 8b, llama3.1-8b, llama3.2-1b, llama3.2-3b"),
        (["-m", "tiny", "--seq", "4096"], "--seq 4096: accepted: 2 to 256"),
        (["-m", "tiny", "--modes", "turbo"], "unknown mode part 'turbo'"),
        (["-m", "tiny", "--modes", "eager,compile"], "accepted: one mode, or several with --ablation"),
        (["-m", "tiny", "--steps", "1"], "--steps 1: accepted: 2 or more"),
    ],
)
def test_bad_options_are_one_line_errors(argv, message, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split())
    assert_no_traceback(err)


def test_compare_of_a_broken_file_names_file_and_line(tmp_path, ablation, capsys):
    _, good, _ = ablation
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text().splitlines()[0] + "\n{not json\n")
    assert main(["bench", "--compare", str(good), str(bad)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{bad}:2: not a JSON object" in err.replace("\n", "")


# Runs the CLI in a process where importing transformers fails, as on a machine without it.
WITHOUT_TRANSFORMERS = """
import sys
from importlib.abc import MetaPathFinder

class Hidden(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "transformers" or name.startswith("transformers."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hidden())
from trainstack.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_hf_config_without_transformers_is_a_clear_error(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    proc = subprocess.run([sys.executable, "-c", WITHOUT_TRANSFORMERS, "bench", "--hf-config", str(config), "--device", "cpu"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 6, proc.stderr
    assert "--hf-config needs the 'transformers' package (pip install transformers)" in proc.stderr
    assert_no_traceback(proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1


def test_hf_config_maps_a_llama_config(tmp_path):
    pytest.importorskip("transformers")
    from trainstack.nn.hf import model_config_from_hf

    config = tmp_path / "config.json"
    llama = {
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    }  # fmt: skip
    config.write_text(json.dumps(llama))
    cfg = model_config_from_hf(str(config))
    assert (cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim, cfg.vocab_size) == (2048, 16, 32, 8, 8192, 128256)
    assert cfg.rope_theta == 500000.0 and cfg.max_seq == 131072


@pytest.mark.slow
def test_fsdp2_under_torchrun_shards_and_reports_totals(tmp_path):
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun not on PATH")
    argv = [
        torchrun, "--nproc-per-node", "2", "--master-port", str(free_port()),
        "-m", "trainstack.cli", "bench", *TINY, "--modes", "eager", "--out", str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    (row,) = [json.loads(line) for line in (tmp_path / "bench-tiny-b2-s64.jsonl").read_text().splitlines()]
    assert row["world_size"] == 2 and "FSDP2" in row["precision"]
    assert row["tokens_per_s_total"] == pytest.approx(2 * row["tokens_per_s_per_gpu"])
    # each rank holds half of every sharded parameter (tiny's dims split evenly in two)
    assert row["params_per_rank"] == PRESETS["tiny"].total_params() // 2
    assert done.stdout.count("trainstack bench: tiny") == 1  # only rank 0 prints


def test_hf_config_of_another_architecture_runs_the_hf_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    from trainstack.nn.hf import HfShape, resolve
    from trainstack.bench.runner import run

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 500, "n_positions": 128}))
    shape = resolve(config)
    assert isinstance(shape, HfShape) and (shape.n_layers, shape.dim, shape.max_seq) == (2, 64, 128)
    reference = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(str(config)))
    assert shape.params == sum(p.numel() for p in reference.parameters())
    # GPT-2 ties the output projection to the token embedding: that matrix product still counts
    assert shape.non_embedding_params() == shape.params - 500 * 64 - 128 * 64 + 500 * 64
    rows = [run(RunSpec("gpt2", shape, mode=parse_mode(m), batch=2, seq=32, steps=2, warmup=1, device="cpu")) for m in ("eager", "ac-full", "planned")]
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]  # memplan plans the HF model itself
    assert rows[1]["loss_final"] == pytest.approx(rows[0]["loss_final"], rel=1e-5)
    assert "keep" in rows[2]["plan"] and rows[2]["loss_final"] == pytest.approx(rows[0]["loss_final"], rel=1e-5)
    # the plan's predicted peaks travel in the row beside the measured ones; unplanned rows carry none
    predicted = rows[2]["plan_predicted"]
    assert 0 < predicted["allocated_gib"] <= predicted["reserved_gib"] and "plan_predicted" not in rows[0]


BENCH_STACK = """\
[stack]
name = "t"
release = "1"
image = "trainstack/t"

[components]
numpy = "*"

[matrix]
cuda = ["cpu"]
os = ["ubuntu24.04"]
python = ["3.12"]

[bench]
{bench}
"""


def test_bench_reads_the_stacks_bench_table_and_flags_win(tmp_path, capsys):
    stack = tmp_path / "stack.toml"
    stack.write_text(BENCH_STACK.format(bench='preset = "tiny"\nbatch = 2\nseq = 64\nsteps = 2\nwarmup = 1\nmodes = ["eager"]'))
    assert main(["bench", "--stack", str(stack), "--device", "cpu", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["model"], document["batch"], document["modes"]) == ("tiny", 2, "eager")
    assert [(r["mode"], r["seq"]) for r in document["rows"]] == [("eager", 64)]
    assert main(["bench", "--stack", str(stack), "--device", "cpu", "--batch", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"] == 3  # a flag given on the command line wins


@pytest.mark.parametrize(("table", "line", "message"), [
    ('preset = "70b"', 15, "bench.preset: '70b' is not a bench preset (one of: tiny, 125m, 1b, 3b, 8b, llama3.1-8b, llama3.2-1b, llama3.2-3b)"),
    ('preset = "tiny"\nseq = 4096', 14, "seq 4096 is longer than preset tiny's max_seq (256)"),
    ('modes = ["compile+warp"]', 15, "bench.modes: unknown mode part 'warp' in 'compile+warp'"),
])
def test_check_refuses_a_bench_table_bench_would_not_run(tmp_path, capsys, table, line, message):
    stack = tmp_path / "stack.toml"
    stack.write_text(BENCH_STACK.format(bench=table))
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"stack.toml:{line}" in err and message in err, err
