"""A sweep job: after its imports (torch and transformers among them), it trains the Hugging
Face causal LM of each config folder named on its command line for two steps on CPU, each in a
child process of its own (forked, as a sweep over models does), printing the config and each
step's loss; exits 1 where a child failed."""

import os
import sys

from hf_config_job import train  # beside this file, on sys.path as the script's folder

failed = 0
for folder in sys.argv[1:]:
    print(f"model {folder}", flush=True)
    sys.stderr.write(f"model {folder}\n")
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            train(folder, f"{folder} ")
        except BaseException as exc:  # noqa: BLE001 - the child's failure is its exit status
            print(f"{folder} failed: {exc!r}", file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    failed += os.waitstatus_to_exitcode(status) != 0
sys.exit(1 if failed else 0)
