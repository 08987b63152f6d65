"""bench --attribute on a real upgrade on the CPU: a Qwen2-shaped Hugging Face model (built by
transformers, not bench's own decoder) trained under transformers 4.46 and under 5.x, the
environments between built from two locked stacks, each component's share of the change.

    python benchmarks/attribute_transformers.py [--out benchmarks/results/attribute_transformers]

On a GPU machine whose image ships torch, with the other wheels carried to a folder:

    UV_NO_INDEX=1 python benchmarks/attribute_transformers.py --over /path/to/python3 --device cuda \
        --find-links WHEELS --out OUT

(--over: the locks leave torch out; every step's venv sees that interpreter's packages after its
own.) Writes into OUT: the two stacks, the model's config.json, bench's table (attribute.txt), its
JSON document (attribute.json, every repeat's row with its environment's versions) and its --out
files; this machine's folders in them are named WORK (the run's folder) and FIND_LINKS. Without
--over the torch wheel comes from pip's find-links where the machine has them (PIP_FIND_LINKS),
else from PyPI (a CUDA build: several GB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = {  # Qwen2's architecture at a size a CPU trains in a few ms a step
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256, "intermediate_size": 704,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8192,
    "max_position_embeddings": 1024, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "torch_dtype": "float32",
}
COMPONENTS = ("transformers", "tokenizers", "huggingface-hub", "safetensors")


def stack_text(release: str, transformers: str, torch: str | None, links: list[str], python: str) -> str:
    index = ""
    if links:
        index = "[index]\nfind_links = [" + ", ".join(f'"{Path(p).absolute().as_uri()}"' for p in links) + "]\npytorch = false\n\n"
    pins = "\n".join([*([f'torch = "=={torch}"'] if torch else []), f'transformers = "=={transformers}"',
                      *(f'{c} = ">=0"' for c in COMPONENTS[1:])])
    name = "hf-cpu" if torch else "hf-over"
    return (f'[stack]\nname = "{name}"\nrelease = "{release}"\nimage = "trainstack/{name}"\n\n{index}[components]\n{pins}\n\n'
            f'[matrix]\ncuda = ["cpu"]\nos = ["debian12"]\npython = ["{python}"]\n')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "attribute_transformers")
    parser.add_argument("--previous", default="4.46.2", help="transformers of the previous release")
    parser.add_argument("--current", default="5.25.0", help="transformers of the new release")
    parser.add_argument("--torch", default="2.13.0", help="torch of both releases")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--order", default="huggingface-hub,tokenizers,transformers")
    parser.add_argument("--over", type=Path, help="an interpreter that ships torch: the locks leave torch out, each step's venv sees its packages")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--find-links", action="append", default=[], help="a folder of wheels (repeatable)")
    parser.add_argument("--locked", type=Path, help="a folder holding previous/ and current/, each a stack this script wrote and "
                        "locked elsewhere (a machine that reaches no index): used as they are")
    args = parser.parse_args()
    out = args.out.absolute()
    work = Path(tempfile.mkdtemp(prefix="attribute-transformers-"))
    links = [str(Path(p).absolute()) for p in [*args.find_links, *os.environ.get("PIP_FIND_LINKS", "").split()] if Path(p).is_dir()]
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if args.over is not None:  # the flavour's Python is the one that ships torch
        python = subprocess.run([str(args.over), "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
                                check=True, capture_output=True, text=True).stdout.strip()
    (work / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n", encoding="utf-8")
    stacks = []
    for name, release, transformers in (("previous", "2026.1.0", args.previous), ("current", "2026.2.0", args.current)):
        if args.locked is not None:
            shutil.copytree(args.locked / name, work / name)
            stacks.append(work / name / "stack.toml")
            continue
        (work / name).mkdir()
        (work / name / "stack.toml").write_text(stack_text(release, transformers, None if args.over else args.torch, links, python), encoding="utf-8")
        subprocess.run([sys.executable, "-m", "trainstack", "lock", str(work / name / "stack.toml")], check=True, cwd=work)
        stacks.append(work / name / "stack.toml")
    argv = [sys.executable, "-m", "trainstack", "bench", "--hf-config", "config.json", "--modes", "eager",
            "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps), "--warmup", "2", "--device", args.device,
            "--attribute", "previous/stack.toml", "current/stack.toml", "--order", args.order, "--repeats", str(args.repeats),
            "--out", "bench", "-o", "attribute.json", *(["--over", str(args.over)] if args.over else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}  # one thread each: no spinning on a shared machine
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    load = os.getloadavg()
    (work / "attribute.txt").write_text(
        f"$ OMP_NUM_THREADS=1 python {' '.join(argv[1:])}\n# exit {done.returncode}, {seconds:.0f} s, load average {load[0]:.1f}\n\n"
        + done.stdout, encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    kept = ["config.json", "attribute.txt", "attribute.json", "previous/stack.toml", "current/stack.toml",
            *(str(p.relative_to(work)) for p in sorted((work / "bench").glob("*")))]
    for relative in kept:
        source = work / relative
        if source.is_file():  # the folders of this machine named as placeholders: WORK, FIND_LINKS
            text = source.read_text(encoding="utf-8").replace(str(work), "WORK")
            for link in links:
                text = text.replace(Path(link).absolute().as_uri(), "file://FIND_LINKS").replace(str(Path(link).absolute()), "FIND_LINKS")
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            (out / relative).write_text(text, encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr[-3000:])
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
