"""Start-up cost of the command line: `trainplan --help` and `trainplan --version` beyond the
interpreter's own start (the same interpreter running `pass`), median of REPEATS runs each, plus
which heavy modules the help loads (none should: commands are imported when they run, see
trainplan/cli.py). Target (issue 12): under 0.3 s. Run: python benchmarks/bench_startup.py"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

REPEATS = 7
ENTRY = "import sys; from trainplan.cli import main; sys.argv = ['trainplan', *sys.argv[1:]]; main()"
HEAVY = ("numpy", "pydantic", "rich", "jinja2", "openai", "yaml")


def median_s(args: list[str]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def heavy_modules_loaded(flag: str) -> list[str]:
    probe = (f"import sys; sys.argv = ['trainplan', '{flag}']\nfrom trainplan.cli import main\ntry:\n    main()\n"
             f"except SystemExit:\n    pass\nprint('loaded:', *(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False).stdout
    return out.strip().splitlines()[-1].split()[1:]


def main() -> None:
    interpreter = median_s([sys.executable, "-c", "pass"])
    print(f"interpreter start (python -c pass): {interpreter * 1000:.0f} ms (median of {REPEATS})")
    for flag in ("--help", "--version"):
        total = median_s([sys.executable, "-c", ENTRY, flag])
        heavy = heavy_modules_loaded(flag)
        print(f"trainplan {flag:<10} {total * 1000:6.0f} ms, {(total - interpreter) * 1000:5.0f} ms beyond the interpreter;"
              f" heavy modules loaded: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
