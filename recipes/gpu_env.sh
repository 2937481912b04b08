#!/usr/bin/env bash
# make gpu-check's environment: a venv that also sees the packages of the Python that makes it,
# so that a machine's own CuPy, numba and torch are used as they are (never reinstalled when they
# fit), plus what the check needs: from the package index, or with a folder of wheels only from
# there (offline machines).  Usage: gpu_env.sh PYTHON VENV [WHEELS]
set -euo pipefail
python=$1 venv=$2 wheels=${3:-}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
  purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$python" -c 'import site; print(*site.getsitepackages(), sep="\n")' > "$purelib/machine-packages.pth"
fi
extras=gpu-check
if ! "$venv/bin/python" -c 'import cupy' 2>/dev/null; then  # no CuPy yet: the wheel of the driver's CUDA
  major=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1 || true)
  case "$major" in 12|13) extras="$extras,cuda$major" ;; *) echo "no CuPy, and nvidia-smi names no CUDA 12 or 13" >&2 ;; esac
fi
src=()
if [ -n "$wheels" ]; then src=(--no-index --find-links "$wheels" --no-build-isolation); fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${src[@]}")
"${pip[@]}" -e ".[$extras]"
"${pip[@]}" --no-deps --force-reinstall -e .  # into this venv, even where the machine's Python has it too
