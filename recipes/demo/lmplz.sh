#!/usr/bin/env bash
# Print the path of KenLM's lmplz, building it first if needed.  lmplz is not in the kenlm
# wheel; this builds it from the PyPI sdist into a cache directory (a few minutes, once).
# Needs: cmake g++ libboost-program-options-dev libboost-system-dev libboost-thread-dev
#        libboost-test-dev libeigen3-dev zlib1g-dev libbz2-dev liblzma-dev
set -euo pipefail
cache="${KENLM_CACHE:-$HOME/.cache/wfst-kenlm}"
lmplz="$cache/kenlm-0.3.0/build/bin/lmplz"
if [ ! -x "$lmplz" ]; then
  mkdir -p "$cache"
  (cd "$cache" && python3 -m pip download --quiet --no-deps --no-binary kenlm kenlm==0.3.0 -d . \
     && tar xzf kenlm-0.3.0.tar.gz)
  mkdir -p "$cache/kenlm-0.3.0/build"
  (cd "$cache/kenlm-0.3.0/build" && cmake .. -DCMAKE_BUILD_TYPE=Release > /dev/null && make -j2 lmplz > /dev/null)
fi
echo "$lmplz"
