"""recipes/slim_wheel.py: a wheel with its shared libraries stripped still installs and loads."""
from __future__ import annotations

import base64
import ctypes
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "recipes"))
from slim_wheel import slim_wheel  # noqa: E402

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("strip")), reason="needs gcc and strip")

LIB = "tiny/_answer.cpython-x86_64-linux-gnu.so"


def a_wheel(tmp_path: Path) -> Path:
    """A wheel holding a Python file and a shared library built with debug information."""
    src = tmp_path / "answer.c"
    src.write_text("static int table[64];\nint answer(void) { table[3] = 42; return table[3]; }\n")
    so = tmp_path / "answer.so"
    subprocess.run(["gcc", "-g3", "-O0", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    files = {"tiny/__init__.py": b"ANSWER = 42\n", LIB: so.read_bytes(),
             "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
             "tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n"}
    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n" for name, data in files.items())
    files["tiny-1.0.dist-info/RECORD"] = (record + "tiny-1.0.dist-info/RECORD,,\n").encode()
    wheel = tmp_path / "dist" / "tiny-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, (2024, 1, 2, 3, 4, 5))
            info.external_attr = (0o755 if name == LIB else 0o644) << 16
            z.writestr(info, data)
    return wheel


def digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_a_slim_wheel_keeps_its_files_and_a_true_record(tmp_path):
    wheel = a_wheel(tmp_path)
    slim = slim_wheel(wheel, tmp_path / "slim")
    assert slim.name == wheel.name
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(slim) as after:
        assert after.namelist() == before.namelist()
        assert len(after.read(LIB)) < len(before.read(LIB)) / 2  # (its debug information gone)
        for name in ("tiny/__init__.py", "tiny-1.0.dist-info/METADATA"):
            assert after.read(name) == before.read(name)
        assert after.getinfo(LIB).external_attr == before.getinfo(LIB).external_attr
        assert after.getinfo(LIB).date_time == before.getinfo(LIB).date_time
        rows = [line.split(",") for line in after.read("tiny-1.0.dist-info/RECORD").decode().splitlines()]
        assert sorted(r[0] for r in rows) == sorted(after.namelist())
        for name, hashed, size in rows:
            if name.endswith("RECORD"):
                assert hashed == size == ""
            else:
                assert hashed == f"sha256={digest(after.read(name))}" and int(size) == len(after.read(name))


def test_a_slim_wheel_installs_and_its_library_loads(tmp_path):
    slim = slim_wheel(a_wheel(tmp_path), tmp_path / "slim")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(site), str(slim)], check=True)
    assert ctypes.CDLL(str(site / LIB)).answer() == 42


def test_the_wheels_own_folder_is_refused(tmp_path):
    wheel = a_wheel(tmp_path)
    with pytest.raises(SystemExit, match="would replace"):
        slim_wheel(wheel, wheel.parent)
