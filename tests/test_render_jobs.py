"""A rendered build (docker buildx bake, docker build) compiles each extension with the job
budget `trainstack build` gives it (the CPUs / the package's divisor, capped), not one job:
the Dockerfile's compile stage computes it from the CPUs the build sees when no build argument
says otherwise (trainstack build passes its own).

Real: a seed stack rendered from its committed lock; each compile stage's own shell line runs
under sh with the machine's nproc, against build's max_jobs for the same CPUs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from trainstack.buildenv import budget_for, max_jobs
from trainstack.cli import main
from trainstack.stackfile import load_stack

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "examples" / "seeds" / "coreweave-torch-extras-2024.5.0.toml"


def test_every_compile_stage_gets_builds_job_budget(tmp_path: Path) -> None:
    assert main(["render", str(SEED), "--out", str(tmp_path / "render")]) == 0
    (dockerfile,) = (tmp_path / "render").rglob("Dockerfile")
    text = dockerfile.read_text()
    bake = (tmp_path / "render" / "docker-bake.hcl").read_text()
    components = {c.key: c for c in load_stack(SEED).components.values()}
    cpus = len(os.sched_getaffinity(0))
    stages = re.findall(r"^FROM \S+ AS compile-(\S+)$", text, flags=re.M)
    assert sorted(stages) == ["apex", "deepspeed", "flash-attn"]
    for name in stages:
        stage = text.split(f"AS compile-{name}\n", 1)[1].split("\nFROM ", 1)[0]
        arg = f"{name.upper().replace('-', '_')}_MAX_JOBS"
        assert f"ARG {arg}=\n" in stage and f"MAX_JOBS=${{{arg}:-$jobs}}" in stage
        assert f"{arg}" not in bake  # the bake file sets none: the stage's own budget applies
        (line,) = [row.strip().rstrip("\\").strip() for row in stage.splitlines() if row.strip().startswith("jobs=")]
        budget = budget_for(components[name])
        # the machine's own CPUs, then machines of 8, 64 and 256 (nproc's answer put in its place)
        for count, program in ((cpus, line), *((n, line.replace("$(nproc)", str(n))) for n in (8, 64, 256))):
            shown = subprocess.run([shutil.which("sh"), "-c", f'{program} echo "$jobs"'], capture_output=True,
                                   text=True, check=True, timeout=30).stdout.strip()
            assert int(shown) == max_jobs(count, budget), (name, count, line)
