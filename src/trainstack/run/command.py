"""The run verb: start a training command with trainstack's hook in every Python it starts."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    argv: list[str] = typer.Argument(None, metavar="COMMAND", help="The job: python train.py ... or torchrun ... train.py ..."),
    out: Path = typer.Option(
        Path("trainstack-run"), "--out", metavar="DIR", help="Folder for traces, kernel tables, OOM snapshots and the control file."
    ),
    old_out: Path | None = typer.Option(None, "-o", hidden=True, help="Deprecated spelling of --out."),
    profile_steps: str | None = typer.Option(
        None, "--profile-steps", help="Profile optimizer steps A to B-1 (A:B, counted from 0, A >= 1) on every rank."
    ),
    profile_count: int = typer.Option(3, "--profile-count", min=1, help="Steps profiled per signal or touch of the control file."),
    signal_name: str = typer.Option("USR1", "--signal", help="Signal that profiles the next steps: USR1, USR2 or off."),
    oom_snapshot: bool = typer.Option(
        False, "--oom-snapshot", help="Record allocator history; on CUDA out-of-memory write a snapshot, an HTML view and a diagnosis."
    ),
    oom_entries: int = typer.Option(100_000, "--oom-entries", min=1, help="Allocator events kept in the history ring."),
    memplan: str | None = typer.Option(
        None, "--memplan", help="Plan and apply recompute to the job's model for this budget ('20GiB', or '0.8' of the GPU)."
    ),
    compile_blocks: bool = typer.Option(False, "--compile", help="torch.compile each repeated block of the job's model."),
) -> None:
    """Run a training job with on-demand profiling, OOM snapshots and the memory plan, with no
    change to its code.

    Profile the next steps of every rank with `kill -USR1 PID` or by touching
    OUT/control/profile.

    trainstack is replaced by the job, so the exit code is the job's own once it starts.

    Example: trainstack run --oom-snapshot --memplan 60GiB -- torchrun --nproc-per-node 8 train.py
    """
    import os

    from trainstack.fsutil import check_output
    from trainstack.run.launch import Request, exec_job, job_env, replaced

    if old_out is not None:
        from trainstack.console import print_error

        print_error("run -o is now --out (a folder); -o will mean --output, a file, as in every other verb", prefix="warning:")
        out = old_out
    check_output(out, "--out", folder=True)
    request = Request(
        argv=list(argv or []),
        out=out,
        profile_steps=profile_steps,
        profile_count=profile_count,
        signal_name=signal_name,
        oom_snapshot=oom_snapshot,
        oom_entries=oom_entries,
        memplan=memplan,
        compile=compile_blocks,
    )
    env = job_env(request)
    ignored = replaced(os.environ, env)
    if ignored:
        from trainstack.console import print_error

        print_error(
            f"{', '.join(ignored)} from the environment not used: trainstack run's options decide (unset them, or give the option instead)",
            prefix="note:",
        )
    exec_job(request.argv, env)
