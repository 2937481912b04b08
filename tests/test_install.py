"""`pip install .` (not only -e) gives the same package layout: wfst, wfst.graphs, wfst.kernels, and the
benchmarks' wfst_bench; the runtime imports none of the benchmarks' packages, and nothing installed runs
git or pip."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("setup.py", "pyproject.toml", "README.md", "wfst", "graphs", "kernels", "benchmarks")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """`pip install .` of a copy of the checkout's sources (so that no stale build/ folder of the
    checkout's is packaged with them), into a folder of its own."""
    tmp = tmp_path_factory.mktemp("install")
    (tmp / "src").mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tmp / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, tmp / "src" / name)
    target = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(tmp / "src")], check=True, capture_output=True)
    return target


def _python(site, code):
    return subprocess.run([sys.executable, "-c", code], cwd=site.parent, env={"PYTHONPATH": str(site)},
                          check=True, capture_output=True, text=True).stdout.split()


def test_regular_install_maps_the_top_level_folders(site):
    code = ("import wfst, wfst.graphs, wfst.kernels, wfst.graphs.cli, wfst_bench, wfst_bench.cli; "
            "print(wfst.__file__); print(wfst.graphs.__file__); print(wfst.kernels.__file__); "
            "print(wfst_bench.__file__)")
    assert _python(site, code) == [str(site / "wfst" / "__init__.py"), str(site / "wfst" / "graphs" / "__init__.py"),
                                   str(site / "wfst" / "kernels" / "__init__.py"),
                                   str(site / "wfst_bench" / "__init__.py")]
    # pyctcdecode's child process runs this file with another Python: it must be installed
    assert (site / "wfst_bench" / "pyctcdecode_worker.py").is_file()
    entry_points = next(site.glob("wfst_ctc-*.dist-info")) / "entry_points.txt"
    assert "wfst-bench = wfst_bench.cli:main" in entry_points.read_text()


def test_the_runtime_imports_no_benchmark_package(site):
    code = ("import sys, wfst, wfst.graphs, wfst.cli, wfst.synthetic, wfst.scoring; "
            "print(sorted(m for m in ('matplotlib', 'wfst_bench', 'kaldi_decoder', 'flashlight') if m in sys.modules))")
    assert _python(site, code) == ["[]"]


def test_nothing_installed_runs_git_or_pip(site):
    """Venvs and git are the Makefile's and the recipes' business, not the installed packages'."""
    forbidden = re.compile(r"""["'](git|pip|venv|ensurepip)["']""")
    found = [f"{p.relative_to(site)}:{i}: {line.strip()}" for p in sorted(site.glob("wfst*/**/*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if forbidden.search(line)]
    assert found == []
