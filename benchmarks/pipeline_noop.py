"""Time `snakemake --cores all` when everything is up to date (target: under 5 seconds).

Run after a full pipeline run: `make bench-pipeline`. Prints the median of 3 no-op runs.
"""

import statistics
import subprocess
import sys
import time


def main() -> int:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        proc = subprocess.run(["snakemake", "--cores", "all"], capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0 or "Nothing to be done" not in proc.stderr + proc.stdout:
            print("the DAG is not up to date: run `make` first\n" + proc.stderr[-2000:], file=sys.stderr)
            return 1
    print(f"no-op snakemake --cores all: median {statistics.median(times):.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in times)}; target < 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
