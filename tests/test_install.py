"""`pip install .` (not only -e) gives the same package layout: wfst, wfst.graphs, wfst.kernels."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_regular_install_maps_the_top_level_folders(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(ROOT)], check=True, capture_output=True)
    code = ("import wfst, wfst.graphs, wfst.kernels, wfst.graphs.cli; "
            "print(wfst.__file__); print(wfst.graphs.__file__); print(wfst.kernels.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)},
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == [str(target / "wfst" / "__init__.py"), str(target / "wfst" / "graphs" / "__init__.py"),
                   str(target / "wfst" / "kernels" / "__init__.py")]
