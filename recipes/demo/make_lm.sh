#!/usr/bin/env bash
# Regenerate data/lm.arpa: a 3-gram estimated by KenLM's lmplz (modified Kneser-Ney)
# from data/lm_train.txt (no pruning).  lmplz.sh builds lmplz once (see there for what it needs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lmplz="$("$here/lmplz.sh")"
"$lmplz" -o 3 --text "$here/data/lm_train.txt" --arpa "$here/data/lm.arpa" -S 20% -T /tmp
