# shared by the GPU bench scripts (sourced after $py and $deadline are set): the device line
# (exit 3 with no GPU) and section(), which runs a part unless the deadline is too close
"$py" - <<'PY' || exit $?
import importlib.util, sys
import torch
if not torch.cuda.is_available():
    print("skip: no GPU (this script measures one H200)")
    sys.exit(3)
tao = "not installed"
if importlib.util.find_spec("torchao"):
    import torchao
    tao = torchao.__version__
print("device:", torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| cuDNN", torch.backends.cudnn.version(), "| torchao", tao)
PY

# run "$@" unless fewer than EST seconds are left before the deadline
section() {
  local name=$1 est=$2
  shift 2
  if [[ -n "$deadline" ]] && (( SECONDS + est > deadline )); then
    echo "$name: not run (${SECONDS} s elapsed, about ${est} s needed, deadline ${deadline} s)"
    return 0
  fi
  echo "== $name (at ${SECONDS} s)"
  # a mode that fails is a row of its own: measure the rest all the same
  "$@" || echo "$name exited $?"
}
