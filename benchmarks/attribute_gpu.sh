#!/usr/bin/env bash
# bench --attribute on a GPU machine that reaches no package index and whose image ships torch
# (benchmarks/attribute_transformers.py --over: the stacks leave torch to the image), in two halves:
#
#   bash benchmarks/attribute_gpu.sh prepare DIR [PYTHON_VERSION]
#       on a machine with an index: DIR/locked/{previous,current}/stack.toml (transformers 4.46.2
#       and 5.25.0, tokenizers, huggingface-hub, safetensors) locked for PYTHON_VERSION (default
#       3.12) with DIR/wheels as find-links, and DIR/wheels holding every wheel both locks pin,
#       uv and trainstack's own dependencies, for manylinux x86_64. DIR's absolute path must be
#       the same on the GPU machine (the locks name it).
#   bash benchmarks/attribute_gpu.sh run DIR OUT [BENCH_ARGS...]
#       on the GPU machine, from this repository's root, DIR copied there: uv and trainstack's
#       dependencies into DIR/site, then the attribution over the image's python3 on the GPU,
#       with no index (uv's --no-index and --offline); OUT gets attribute_transformers.py's files.
#       BENCH_ARGS go to attribute_transformers.py (default: --batch 8 --seq 1024 --steps 30
#       --repeats 5).
set -euo pipefail
mode=${1:?usage: attribute_gpu.sh prepare DIR [PYTHON_VERSION] | run DIR OUT [BENCH_ARGS...]}
dir=$(realpath -m "${2:?DIR}")
root=$(cd "$(dirname "$0")/.." && pwd)
own="uv tenacity pyelftools junitparser defusedxml pydantic pydantic-core annotated-types typing-inspection"

case $mode in
prepare)
    py=${3:-3.12}
    mkdir -p "$dir/wheels" "$dir/locked"
    python3 - "$dir" "$py" "$root" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[3]) / "benchmarks"))
from attribute_transformers import stack_text
base, python = Path(sys.argv[1]), sys.argv[2]
for name, release, transformers in (("previous", "2026.1.0", "4.46.2"), ("current", "2026.2.0", "5.25.0")):
    (base / "locked" / name).mkdir(parents=True, exist_ok=True)
    (base / "locked" / name / "stack.toml").write_text(stack_text(release, transformers, None, [str(base / "wheels")], python))
EOF
    for side in previous current; do python3 -m trainstack lock "$dir/locked/$side/stack.toml"; done
    platforms=""
    for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64 \
             manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do platforms+=" --platform $p"; done
    pins=$(grep -ho '^[A-Za-z0-9._-]*==[^ ]*' "$dir"/locked/*/stack.lock/locks/*-release.txt | sort -u)
    for pin in $pins $own; do  # one at a time: the two locks pin the same names at other versions
        if [[ $pin != *==* ]] && compgen -G "$dir/wheels/$(echo "$pin" | tr - _)-[0-9]*.whl" >/dev/null; then continue; fi  # a locked one serves
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
            $platforms -d "$dir/wheels" "$pin"
    done
    echo "prepared $dir: $(ls "$dir/wheels" | wc -l) wheels, $(du -sh "$dir/wheels" | cut -f1)"
    ;;
run)
    out=$(realpath -m "${3:?OUT}")
    shift 3
    args=("$@")
    [ ${#args[@]} -gt 0 ] || args=(--batch 8 --seq 1024 --steps 30 --repeats 5)
    names=()
    for n in $own; do names+=("$dir/wheels/$(echo "$n" | tr - _)"-[0-9]*.whl); done
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$dir/site" "${names[@]}"
    export PYTHONPATH="$dir/site:$root/src" PATH="$dir/site/bin:$PATH" UV_NO_INDEX=1 UV_OFFLINE=1
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
    python3 "$root/benchmarks/attribute_transformers.py" --over "$(python3 -c 'import sys; print(sys.executable)')" \
        --device cuda --find-links "$dir/wheels" --locked "$dir/locked" --out "$out" "${args[@]}"
    ;;
*)
    echo "attribute_gpu.sh: $mode: accepted: prepare, run" >&2
    exit 2
    ;;
esac
