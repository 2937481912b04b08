"""What every recipe's command line shares, as the console scripts have it: options checked
before any work (a bad one is one line and exit status 2), outputs checked before the run,
errors the user can act on as one line, warnings and Ctrl-C as one line (exit 130)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wfst.cli import CliParser, command, fail
from wfst.errors import WfstError
from wfst.files import why_unwritable


def parser(doc: str | None) -> CliParser:
    return CliParser(prog=Path(sys.argv[0]).name, description=doc,
                     formatter_class=argparse.RawDescriptionHelpFormatter)


def whole(least: int = 1):
    """An argparse type: a whole number >= least."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
        return value
    return parse


def listed(choices=None, item=str):
    """An argparse type: a comma-separated list, each item parsed by `item` (and one of
    `choices`, if given), none twice, at least one."""
    def parse(text: str) -> list:
        values = [item(v.strip()) for v in text.split(",") if v.strip()]
        if not values:
            raise argparse.ArgumentTypeError("none given")
        unknown = [v for v in values if choices is not None and v not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown[0]!r}; choose from {', '.join(map(str, choices))}")
        twice = [v for i, v in enumerate(values) if v in values[:i]]
        if twice:
            raise argparse.ArgumentTypeError(f"{twice[0]!r} given twice")
        return values
    return parse


def positive(text: str) -> float:
    """An argparse type (and a listed item): a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def check_json(ap: argparse.ArgumentParser, path) -> None:
    """--json is written at the end (its folders made then): say now, not after the run,
    when it cannot be."""
    if path and (problem := why_unwritable(path, make_parents=True)):
        ap.error(f"argument --json: cannot write {path}: {problem}")


def check_folder(ap: argparse.ArgumentParser, option: str, path) -> None:
    """An output folder (made if missing) must be one that can be made and written: say now,
    not after the work (a folder below a file was found out after six graph builds)."""
    if Path(path).exists() and not Path(path).is_dir():
        ap.error(f"argument {option}: {path} is a file, not a folder")
    problem = why_unwritable(Path(path) / "file", make_parents=True)
    if problem:
        ap.error(f"argument {option}: cannot write in {path}: {problem}")


def check_graphs(ap: argparse.ArgumentParser, graphs, names) -> None:
    """--graphs must hold the graphs the run reads: say now, not after loading the LMs."""
    missing = [name for name in names if not (Path(graphs) / name / "graph.json").is_file()]
    if missing:
        ap.error(f"argument --graphs: {Path(graphs) / missing[0]} holds no graph (make demo builds the demo's, "
                 f"--graphs names another folder of them)")


def run(main) -> int:
    """main() with the errors a user can act on (bad inputs, unwritable outputs) as one line."""
    prog = Path(sys.argv[0]).name

    @command(prog)
    def guarded() -> int:
        try:
            return main()
        except (WfstError, OSError) as e:
            return fail(prog, e)
    return guarded()
