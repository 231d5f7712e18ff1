"""Call overhead of opbridge's PyTorch ops on a small input (1x4096, no
gradient), compared side by side between builds — e.g. a checkout of an
earlier release and this one — each given as its environment's Python:

    python benchmarks/call_overhead.py --python OLD/.venv/bin/python --python .venv/bin/python

Two measures per build and op: wall-clock microseconds per call (median of
rounds, the builds interleaved) and, with --callgrind, instructions per call
counted by valgrind (repeatable on a busy machine). Ratios are against the
first build. ``--mode inference_mode`` makes the calls under
``torch.inference_mode()``, where the dispatcher skips the autograd key (and
so any autograd kernel); the default, ``normal``, is a plain call with grad
mode on and no input requiring grad.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

CALLS = {
    "rms_norm": "opbridge.rms_norm(x, w, None, 1e-6)",
    "scaled_clamp": "opbridge.scaled_clamp(x, 0.5, 0.0, 6.0)",
}

MODES = {"normal": "contextlib.nullcontext()", "inference_mode": "torch.inference_mode()"}
# Per process, of its rounds: the median, or on a busy machine the fastest
# round (other processes only ever add time).
STATISTICS = {"median": "statistics.median", "min": "min"}

TIMER = """
import contextlib, sys, time, statistics, torch, opbridge
torch.set_num_threads({threads})
mode = {context}  # kept: inference_mode's guard lives as long as the object
mode.__enter__()
x = torch.randn(1, 4096); w = torch.randn(4096)
f = lambda: {call}
for _ in range(2000): f()
rounds = []
for _ in range({rounds}):
    start = time.perf_counter()
    for _ in range({calls}): f()
    rounds.append((time.perf_counter() - start) / {calls} * 1e6)
print({statistic}(rounds))
"""

COUNTED = """
import contextlib, sys, torch, opbridge
torch.set_num_threads(1)
mode = {context}  # kept: inference_mode's guard lives as long as the object
mode.__enter__()
x = torch.randn(1, 4096); w = torch.randn(4096)
for _ in range(10 + int(sys.argv[1])): {call}
"""


def wall_us(python: str, call: str, mode: str, args: argparse.Namespace) -> float:
    code = TIMER.format(
        threads=args.threads,
        context=MODES[mode],
        call=call,
        calls=args.calls,
        rounds=args.rounds,
        statistic=STATISTICS[args.statistic],
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def instructions_per_call(python: str, call: str, mode: str, calls: int) -> float:
    counts = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (0, calls):
            result = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={Path(tmp) / 'out'}",
                    python,
                    "-c",
                    COUNTED.format(context=MODES[mode], call=call),
                    str(n),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            counts.append(int(re.search(r"Collected : (\d+)", result.stderr).group(1)))
    return (counts[1] - counts[0]) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", required=True, help="a build's Python")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per build")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions")
    parser.add_argument(
        "--mode", choices=sorted(MODES), default="normal", help="how the ops are called"
    )
    parser.add_argument(
        "--statistic",
        choices=sorted(STATISTICS),
        default="median",
        help="of each process's rounds (min: the fastest, for a busy machine)",
    )
    args = parser.parse_args()
    for op, call in CALLS.items():
        times = {p: [] for p in args.python}
        for _ in range(args.repeats):
            for python in args.python:
                times[python].append(wall_us(python, call, args.mode, args))
        base = statistics.median(times[args.python[0]])
        for python in args.python:
            median = statistics.median(times[python])
            line = f"{op:13s} [{args.mode}] {python}: {median:7.2f} us/call ({median / base:.2f}x)"
            if args.callgrind:
                counted = instructions_per_call(python, call, args.mode, 3000)
                line += f", {counted:,.0f} instructions/call"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
