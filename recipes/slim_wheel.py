#!/usr/bin/env python3
"""A wheel made small enough to carry: its shared libraries stripped of their debug symbols.

pynini's wheel is 165 MB, over what a call to a lent GPU machine carries (64 MiB); nearly
all of it is debug information (its libraries are 720 MB installed, 31 MB stripped).  This
writes the same wheel (same name, files, modes) with every shared library passed through
`strip --strip-unneeded` (the symbols other libraries link against stay) and its RECORD
made again, so pip installs it as it would the original: 6 MB for pynini.

    python recipes/slim_wheel.py WHEEL OUT_DIR   (make gpu-kit does it for pynini)
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path


def slim_wheel(wheel: Path, out: Path) -> Path:
    """`wheel` again in the folder `out` (not the wheel's own), its shared libraries stripped."""
    if shutil.which("strip") is None:
        raise SystemExit(f"{wheel.name}: binutils' strip is needed to make it smaller (apt-get install binutils)")
    if Path(out).resolve() == Path(wheel).resolve().parent:
        raise SystemExit(f"{out}: the slim wheel would replace {wheel.name}; give another folder")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            files = [i for i in z.infolist() if not i.is_dir()]
            z.extractall(root)
        libs = [str(root / i.filename) for i in files if ".so" in Path(i.filename).suffixes]
        if libs:
            subprocess.run(["strip", "--strip-unneeded", *libs], check=True)
        record = next((i.filename for i in files if i.filename.endswith(".dist-info/RECORD")), None)
        if record is None:
            raise SystemExit(f"{wheel}: no .dist-info/RECORD: not a wheel")
        rows = []
        for i in files:
            data = (root / i.filename).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{i.filename},," if i.filename == record else f"{i.filename},sha256={digest},{len(data)}")
        (root / record).write_text("\n".join(rows) + "\n")
        Path(out).mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(Path(out) / wheel.name, "w", zipfile.ZIP_DEFLATED) as z:
            for i in files:  # (each entry's ZipInfo kept: its name, time and file mode)
                z.writestr(i, (root / i.filename).read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    return Path(out) / wheel.name


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="the wheel to make small")
    ap.add_argument("out", type=Path, help="the folder to write it into (not the wheel's own)")
    args = ap.parse_args()
    done = slim_wheel(args.wheel, args.out)
    print(f"{done}: {done.stat().st_size / 1e6:.1f} MB (was {args.wheel.stat().st_size / 1e6:.1f} MB)")
