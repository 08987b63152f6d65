#!/usr/bin/env python3
"""trainstack run on one GPU: profiling by signal, idle-hook overhead, an OOM snapshot with its
diagnosis, and the memory plan applied to an unchanged job.

Jobs (tests/data/run/, no trainstack in them):
  plain    llama_loop.py: a Llama-shaped model from a config in a plain loop (bf16 autocast,
           fused AdamW); prints tokens/s over its timed steps and the allocator's peaks
  trainer  trainer_job.py: a Hugging Face Trainer job (Llama from a config, synthetic data)

Stages, in order (a job is skipped once --time-budget is spent):
  1. plain alone, then under `trainstack run` (hook installed, idle during the timed steps;
     SIGUSR1 after them: the trace and kernel table of the next steps); at the end both
     again in reverse order: throughput hooked/alone over all four
  2. plain capped below its natural peak (--mem-gib) under `trainstack run --oom-snapshot`:
     the snapshot, HTML view and diagnosis; the job's own error and exit code
  3. the same capped job under `trainstack run --memplan <the diagnosis's budget>`: its exit
     code, the hook's memplan line (the plan, its probe steps' measured peaks, the allocator),
     and the job's measured peak reserved against the budget
  4. trainer under `trainstack run` with SIGUSR1 after its timed steps, then alone
  5. compile: a small plain job under `trainstack run --compile` (its blocks compiled, it
     trains); last, and run only with COMPILE_NEEDS_S of the budget left

Results go to --out (run_h200.txt, run_h200.json), rewritten after each stage, so a run cut
short keeps the stages it finished.

Usage: PYTHONPATH=src python benchmarks/run_h200.py [--out benchmarks/results/run_h200] [--artifacts DIR] [--time-budget 170]
         [--stages plain,oom,trainer,compile]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "run"
RUN = [sys.executable, "-m", "trainstack.cli", "run"]
PLAIN = [sys.executable, str(DATA / "llama_loop.py"), "--layers", "8", "--hidden", "2048", "--batch", "16", "--seq", "1024"]
TRAINER = [sys.executable, str(DATA / "trainer_job.py"), "--layers", "8", "--hidden", "1024", "--batch", "8", "--seq", "1024"]
COMPILED = [sys.executable, str(DATA / "llama_loop.py"), "--layers", "2", "--hidden", "1024", "--batch", "8", "--seq", "512"]
GiB = 2**30
CAP_FRACTION = 0.8  # the planted OOM: the plain job capped at this fraction of its natural peak
COMPILE_NEEDS_S = 75  # the compile stage's start-up and cold compile of one Llama block


class Jobs:
    def __init__(self, work: Path, budget: float) -> None:
        self.work = work
        self.deadline = time.monotonic() + budget
        self.log = work / "jobs.log"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, argv: list[str], *, signal_after: str | None = None, timeout: float = 90) -> dict:
        """Run a job, streaming its output to the log; send SIGUSR1 once a line starts with
        ``signal_after``. Returns its exit code, JSON lines, stderr tail and wall time."""
        timeout = min(timeout, self.left())
        if timeout < 15:
            return {"name": name, "skipped": "time budget spent"}
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        start = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"\n=== {name}: {' '.join(argv)}\n")
            log.flush()
            job = subprocess.Popen(argv, cwd=self.work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            watchdog = threading.Timer(timeout, job.kill)  # a job silent past its time (compiling) is ended too
            watchdog.start()
            lines, records, signalled = [], [], None
            try:
                assert job.stdout is not None
                for line in job.stdout:
                    log.write(line)
                    lines.append(line.rstrip("\n"))
                    if line.startswith("{"):
                        try:
                            records.append(json.loads(line))
                        except json.JSONDecodeError:
                            pass
                    if signal_after and signalled is None and line.startswith(signal_after):
                        os.kill(job.pid, signal.SIGUSR1)
                        signalled = time.monotonic() - start
                    if time.monotonic() - start > timeout:
                        job.kill()
                        break
                rc = job.wait(timeout=30)
            finally:
                watchdog.cancel()
                if job.poll() is None:
                    job.kill()
        hook = [line for line in lines if line.startswith("trainstack run:")]
        return {"name": name, "rc": rc, "records": records, "signal_at_s": signalled, "wall_s": time.monotonic() - start, "tail": lines[-6:], "hook_lines": hook}


def timed(result: dict, key: str) -> float | None:
    return next((r[key] for r in result.get("records", []) if key in r), None)


def peak(result: dict) -> int | None:
    return next((r["max_reserved"] for r in reversed(result.get("records", [])) if "max_reserved" in r), None)


def profiles(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.kernels.txt"))


def plain(jobs: Jobs, results: dict, order: tuple[bool, ...]) -> None:
    """Plain-loop runs alone and hooked in ``order``; the throughput ratio over all so far."""
    runs = results.setdefault("plain", [])
    for hooked in order:
        out = jobs.work / f"plain-{len(runs)}"
        argv = [*PLAIN, "--warmup", "5", "--timed", "30", "--extra", "8" if hooked else "0"]
        if hooked:
            argv = [*RUN, "--out", str(out), "--profile-count", "3", "--", *argv]
        r = jobs.run(f"plain {'hooked' if hooked else 'alone'} #{len(runs)}", argv, signal_after='{"timed"' if hooked else None)
        r["hooked"] = hooked
        r["profiles"] = profiles(out / "profile") if hooked else []
        runs.append(r)
    alone = [timed(r, "tokens_per_s") for r in runs if not r["hooked"] and timed(r, "tokens_per_s")]
    hooked = [timed(r, "tokens_per_s") for r in runs if r["hooked"] and timed(r, "tokens_per_s")]
    if alone and hooked:
        results["plain_hooked_over_alone"] = (sum(hooked) / len(hooked)) / (sum(alone) / len(alone))
    results["plain_natural_peak_reserved"] = max((peak(r) or 0) for r in runs) or None


def oom_then_plan(jobs: Jobs, results: dict) -> None:
    natural = results.get("plain_natural_peak_reserved")
    if not natural:
        results["oom"] = {"skipped": "no natural peak measured"}
        return
    cap_gib = round(natural * CAP_FRACTION / GiB, 2)
    capped = [*PLAIN, "--warmup", "2", "--timed", "5", "--mem-gib", str(cap_gib)]
    out = jobs.work / "oom"
    r = jobs.run("plain capped, OOM snapshot", [*RUN, "--out", str(out), "--oom-snapshot", "--oom-entries", "4000", "--", *capped], timeout=120)
    text_file = out / "oom" / "oom-rank0.txt"
    diagnosis = text_file.read_text().strip() if text_file.exists() else None
    files = sorted(p.name for p in (out / "oom").glob("*")) if (out / "oom").exists() else []
    budget = re.search(r"--memplan ([0-9.]+GiB)", diagnosis or "")
    results["oom"] = {**r, "cap_gib": cap_gib, "natural_peak_gib": natural / GiB, "files": files, "diagnosis": diagnosis,
                      "error_line": next((line for line in reversed(r.get("tail", [])) if "OutOfMemoryError" in line), None)}
    if budget is None:
        results["memplan"] = {"skipped": "the diagnosis suggested no budget"}
        return
    planned = jobs.run(f"plain capped, --memplan {budget.group(1)}", [*RUN, "--out", str(jobs.work / "memplan"), "--memplan", budget.group(1), "--", *capped], timeout=120)
    budget_bytes = float(budget.group(1).removesuffix("GiB")) * GiB
    measured = peak(planned)
    hook = planned.get("hook_lines", [])
    results["memplan"] = {**planned, "budget": budget.group(1), "peak_reserved_gib": measured / GiB if measured else None,
                          "under_budget": planned.get("rc") == 0 and measured is not None and measured <= budget_bytes,
                          "budget_below_natural_peak": budget_bytes < natural,
                          "tokens_per_s": timed(planned, "tokens_per_s"),
                          "plan_line": next((line for line in hook if "memplan for" in line), None),
                          "memplan_notes": [line for line in hook if line.startswith("trainstack run: memplan:")],
                          "error_line": next((line for line in reversed(planned.get("tail", [])) if "Error" in line), None) if planned.get("rc") else None}


def trainer(jobs: Jobs, results: dict, hooked: bool) -> None:
    runs = results.setdefault("trainer", [])
    out = jobs.work / f"trainer-{int(hooked)}"
    argv = [*TRAINER, "--timed", "40", "--steps", str(3 + 40 + (8 if hooked else 0)), "--out", str(out / "hf")]
    if hooked:
        argv = [*RUN, "--out", str(out), "--profile-count", "3", "--", *argv]
    r = jobs.run(f"trainer {'hooked' if hooked else 'alone'}", argv, signal_after='{"timed"' if hooked else None, timeout=120)
    r["hooked"] = hooked
    r["profiles"] = profiles(out / "profile") if hooked else []
    runs.append(r)
    alone = [timed(r, "steps_per_s") for r in runs if not r["hooked"] and timed(r, "steps_per_s")]
    with_hook = [timed(r, "steps_per_s") for r in runs if r["hooked"] and timed(r, "steps_per_s")]
    if alone and with_hook:
        results["trainer_hooked_over_alone"] = with_hook[0] / alone[0]


def compiled(jobs: Jobs, results: dict) -> None:
    """A small plain job under --compile: its blocks compiled (the hook's line), it trains."""
    if jobs.left() < COMPILE_NEEDS_S:
        results["compile"] = {"skipped": f"{jobs.left():.0f} s of the time budget left, {COMPILE_NEEDS_S} s needed"}
        return
    argv = [*RUN, "--out", str(jobs.work / "compile"), "--compile", "--", *COMPILED, "--warmup", "3", "--timed", "10"]
    r = jobs.run("plain small, --compile", argv, timeout=150)
    results["compile"] = {**r, "tokens_per_s": timed(r, "tokens_per_s"),
                          "compile_line": next((line for line in r.get("hook_lines", []) if line.startswith("trainstack run: compiled ")), None)}


# the targets first, the repeats for the throughput ratio last (skipped if time runs out)
STAGES = (
    ("plain", lambda jobs, results: plain(jobs, results, (False, True))),
    ("oom", oom_then_plan),
    ("trainer", lambda jobs, results: trainer(jobs, results, True)),
    ("trainer", lambda jobs, results: trainer(jobs, results, False)),
    ("plain", lambda jobs, results: plain(jobs, results, (True, False))),
    ("compile", compiled),
)


def report(results: dict) -> str:
    lines = [f"trainstack run on {results.get('gpu')} (torch {results.get('torch')})"]
    for r in results.get("plain", []):
        lines.append(f"  plain {'hooked' if r.get('hooked') else 'alone '}: {timed(r, 'tokens_per_s') or 0:,.0f} tokens/s  peak reserved {((peak(r) or 0) / GiB):.2f} GiB  profiles {r.get('profiles')}")
    if "plain_hooked_over_alone" in results:
        lines.append(f"  plain hooked/alone throughput: {results['plain_hooked_over_alone']:.4f}")
    oom = results.get("oom")
    if oom is not None:
        lines.extend(_oom_lines(oom, results.get("memplan", {})))
    for r in results.get("trainer", []):
        lines.append(f"  trainer {'hooked' if r.get('hooked') else 'alone '}: {timed(r, 'steps_per_s') or 0:.3f} steps/s  exit {r.get('rc')}  profiles {r.get('profiles')}")
    if "trainer_hooked_over_alone" in results:
        lines.append(f"  trainer hooked/alone throughput: {results['trainer_hooked_over_alone']:.4f}")
    comp = results.get("compile")
    if comp is not None:
        if "skipped" in comp:
            lines.append(f"  --compile: skipped ({comp['skipped']})")
        else:
            lines.append(f"  --compile (2 layers, hidden 1024, batch 8x512): exit {comp.get('rc')}, {comp.get('tokens_per_s') or 0:,.0f} tokens/s, {comp.get('wall_s', 0):.0f} s wall")
            lines.append(f"    {comp.get('compile_line') or (comp.get('tail') or ['no output'])[-1]}")
    return "\n".join(lines)


def _oom_lines(oom: dict, mp: dict) -> list[str]:
    """The planted OOM and its --memplan rerun, when that stage ran."""
    lines = [f"  planted OOM at cap {oom.get('cap_gib')} GiB (natural peak {oom.get('natural_peak_gib') or 0:.2f} GiB): exit {oom.get('rc')}, files {oom.get('files')}",
             f"    job's error: {oom.get('error_line')}",
             f"    diagnosis: {oom.get('diagnosis')}"]
    reserved = f"{mp['peak_reserved_gib']:.2f}" if mp.get("peak_reserved_gib") else None
    lines.append(f"  --memplan {mp.get('budget')}: exit {mp.get('rc')}, peak reserved {reserved} GiB, under budget {mp.get('under_budget')}, budget below natural peak {mp.get('budget_below_natural_peak')}, {mp.get('tokens_per_s') or 0:,.0f} tokens/s")
    for line in [mp.get("plan_line") or mp.get("skipped"), *mp.get("memplan_notes", []), mp.get("error_line")]:
        if line:
            lines.append(f"    {line}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "run_h200")
    parser.add_argument("--artifacts", type=Path, default=None, help="folder for traces, tables, the OOM snapshot and view, the jobs' log")
    parser.add_argument("--time-budget", type=float, default=130)
    parser.add_argument("--stages", default="plain,oom,trainer,compile", help="which stages run, comma-separated (of plain, oom, trainer, compile)")
    args = parser.parse_args()
    wanted = {name.strip() for name in args.stages.split(",") if name.strip()}
    unknown = wanted - {name for name, _ in STAGES}
    if unknown:
        parser.error(f"--stages: unknown {', '.join(sorted(unknown))}; accepted: plain, oom, trainer, compile")
    import torch

    if not torch.cuda.is_available():
        print("skip: no GPU")
        return
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "trainstack-run-h200"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    jobs = Jobs(work, args.time_budget)
    results: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "stages": sorted(wanted), "time_budget_s": args.time_budget}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, stage in STAGES:
        if name not in wanted:
            continue
        stage(jobs, results)
        results["elapsed_s"] = args.time_budget - jobs.left()
        print(report(results), flush=True)
        (args.out / "run_h200.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        (args.out / "run_h200.txt").write_text(report(results) + "\n")
    if args.artifacts is not None:
        args.artifacts.mkdir(parents=True, exist_ok=True)
        snapshot = work / "oom" / "oom" / "oom-rank0.pickle"
        if snapshot.exists():
            (args.artifacts / "oom-h200.pickle.gz").write_bytes(gzip.compress(snapshot.read_bytes()))
        with tarfile.open(args.artifacts / "run-h200-artifacts.tar.gz", "w:gz") as tar:
            for path in sorted(work.rglob("*")):
                if path.is_file() and path.suffix in (".txt", ".html", ".log") or path.name.endswith(".trace.json") and "plain-1" in str(path):
                    tar.add(path, arcname=str(path.relative_to(work)))


if __name__ == "__main__":
    main()
