"""One mode in a fresh process: ``python -m trainstack.bench.worker SPEC.json RESULT.json``.

The ablation starts one of these per mode so that compile caches, allocator state and
a previous mode's OOM never leak into the next measurement.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainstack.bench import runtime
from trainstack.bench.versions import imported_versions
from trainstack.fsutil import atomic_write_json


def main(argv: list[str]) -> int:
    spec_path, result_path = (Path(a) for a in argv)
    runtime.install()  # started in another environment (bench --in): trainstack's own helpers from the one that started it
    from trainstack.bench.device import MeetingError, close_process_group
    from trainstack.bench.runner import RunSpec, run

    try:
        row = run(RunSpec.from_json(json.loads(spec_path.read_text(encoding="utf-8"))))
    except MeetingError as exc:  # the parent reports the last line as the row's error
        print(f"error: {exc}", file=sys.stderr)
        return 1
    row["environment"] = imported_versions()  # what this process ran on, so that the row can be rebuilt
    # a diverged run's NaN loss goes back to the parent, which reports it
    atomic_write_json(result_path, row, allow_nan=True)
    close_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
