"""Run: trainstack's profiling, OOM snapshots and memory plan inside a user's own training job.

``trainstack run -- python train.py`` (or the ``TRAINSTACK_*`` variables read by the hook the
venv build installs) turns them on with no change to the job's code. Nothing here imports
torch until a variable asks for something.
"""
