"""A 10^4-design sweep through the tool and through the Python package, on
one and two workers (docs/python.md, "Sweeps": the measured table).

    PYTHONPATH=build/python SIGPROP_CLI=build/cli/sigprop /usr/bin/python3 scripts/sweep_benchmark.py

The grid: arch {pre-ln, post-ln} x scheme {xavier, bert, dslm, admin,
deepnet} x layers 12..120 x d 256..2560 x dropout 0..0.09 (10 values each),
seq 128. Every way of running it must give the same rows.
"""
import concurrent.futures
import os
import subprocess
import sys
import time

import sigprop

GRID = {"arch": ["pre-ln", "post-ln"], "scheme": ["xavier", "bert", "dslm", "admin", "deepnet"],
        "layers": "12:120:12", "d": "256:2560:256", "dropout": "0:0.09:0.01", "seq": 128}


def cli_args(grid, jobs):
    args = []
    for key, value in grid.items():
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        args += ["--" + key.replace("_", "-"), text]
    return ["sweep", *args, "--jobs", str(jobs)]


def timed(run):
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def main():
    cli = os.environ.get("SIGPROP_CLI", "build/cli/sigprop")
    rows = {}
    lines = []
    for jobs in (1, 2):
        seconds, out = timed(lambda: subprocess.run([cli, *cli_args(GRID, jobs)], check=True, capture_output=True,
                                                    text=True).stdout)
        rows[f"cli --jobs {jobs}"] = out
        lines.append((f"`sigprop sweep --jobs {jobs}`", seconds, out.count("\n") - 1))
    seconds, frame = timed(lambda: sigprop.sweep(GRID))
    lines.append(("`sigprop.sweep(grid)`", seconds, len(frame)))
    for workers in (1, 2):
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            seconds, other = timed(lambda: sigprop.sweep(GRID, executor=pool))
        assert other.equals(frame), "a thread pool changed the rows"
        lines.append((f"`sigprop.sweep(grid, executor=ThreadPoolExecutor({workers}))`", seconds, len(other)))
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        seconds, other = timed(lambda: sigprop.sweep(GRID, executor=pool))
    assert other.equals(frame), "a process pool changed the rows"
    lines.append(("`sigprop.sweep(grid, executor=ProcessPoolExecutor(2))`", seconds, len(other)))
    assert rows["cli --jobs 1"] == rows["cli --jobs 2"], "--jobs 2 changed the rows"

    base = lines[0][1]
    print("| run | designs | wall s | per design | against the tool on one thread |")
    print("|---|---|---|---|---|")
    for name, seconds, count in lines:
        print(f"| {name} | {count} | {seconds:.2f} | {1e3 * seconds / count:.2f} ms | {base / seconds:.2f}x |")
    print(f"(cores: {os.cpu_count()}, python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
