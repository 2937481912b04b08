"""The code a comparison recipe runs: the checkout's commit and its uncommitted changes.

Asked of git here, in the recipes, and handed to wfst_bench.compare as data (it records it
in every cell and in results.md): the installed packages never run git.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ("wfst", "kernels", "graphs", "benchmarks")  # the folders whose code decides the cells


def code_state() -> dict:
    """``{"commit": short hash or None, "uncommitted": [changed tracked files under CODE]}``;
    the commit is None outside a git checkout or without git."""

    def git(*args):
        try:
            p = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=20)
            return p.stdout if p.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    commit = (git("rev-parse", "--short", "HEAD") or "").strip() or None
    status = git("status", "--porcelain", "--untracked-files=no", "--", *CODE)
    changed = (line[3:].split(" -> ")[-1] for line in (status or "").splitlines() if line.strip())  # renames: new name
    return {"commit": commit, "uncommitted": sorted(changed)}
