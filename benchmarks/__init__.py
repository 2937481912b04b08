"""wfst_bench: the benchmarks and comparison experiments of `wfst`, kept out of the runtime package.

Installed from the top-level folder ``benchmarks/`` with ``wfst``; what it needs beyond
``wfst`` comes with the ``bench`` extra (``pip install '.[bench]'``: matplotlib,
kaldi-decoder + kaldifst, flashlight-text).  It uses only the public API of ``wfst``.

- :mod:`wfst_bench.systems` — one adapter per decoder (greedy CTC, ours on the CPU with N
  threads or on CUDA, Kaldi's FasterDecoder, flashlight-text, pyctcdecode), used by both of:
- :mod:`wfst_bench.cli` — the ``wfst-bench`` command (``make bench-decode``);
- :mod:`wfst_bench.compare` — ``make compare-topologies`` / ``make compare-decoders``:
  resumable cells, tuning on dev, tables, plots, goal checks;
- :mod:`wfst_bench.peers` — flashlight-text and pyctcdecode themselves (pyctcdecode in the
  venv ``make pyctcdecode-venv`` makes, through ``pyctcdecode_worker.py``);
- :mod:`wfst_bench.kaldi` — Kaldi's FasterDecoder on a TLG, also the tests' reference;
- :mod:`wfst_bench.machine` — the CPU, cores, GPU and versions a figure was measured with.
"""
