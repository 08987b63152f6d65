"""memplan --hf-config and bench --hf-config (the planned mode, CPU) through trainstack's CLI
entry, on each config folder named on the command line after the first argument, in this one
process (one start of torch and transformers for all of them); prints one JSON object: per
folder, each verb's exit code, its JSON document and its error lines. The first argument is
``plan``, or ``refuse`` for configs the verbs refuse (bench then asks for the eager mode)."""

import contextlib
import io
import json
import sys

from trainstack.cli import main

VERBS = {
    "memplan": ["memplan", "--batch", "1", "--seq", "16", "--budget", "1GiB", "--json"],
    "bench": ["bench", "--device", "cpu", "--batch", "1", "--seq", "16", "--steps", "2", "--warmup", "1", "--modes", "planned", "--json"],
}

if sys.argv[1] == "refuse":
    VERBS["bench"][VERBS["bench"].index("planned")] = "eager"
results = {}
for folder in sys.argv[2:]:
    for verb, argv in VERBS.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*argv, "--hf-config", folder])
        try:
            document = json.loads(out.getvalue())
        except ValueError:
            document = None
        errors = [line for line in err.getvalue().splitlines() if line.startswith("error") or "Traceback" in line]
        results[f"{folder} {verb}"] = {"code": code, "document": document, "errors": errors}
print(json.dumps(results))
