"""Time of the plain-language parser on adversarial requests of growing length: per input kind
the milliseconds at 500, 1,000, 2,000 and 4,000 characters (MAX_CHARS), and the time to refuse a
100,000-digit number (issue 13: 23 s for 16,000 digits and over 11 minutes for 100,000 before the
parser was bounded). Linear parsing shows as times that roughly double with the length.
Run: python benchmarks/bench_request.py"""

from __future__ import annotations

import time

from trainplan.agent.request import parse_partial
from trainplan.tools.core.errors import InputError

KINDS = {
    "spaced digits": "12 ",
    "letters": "a",
    "request words": "llama on H100 gpus nodes of ",
    "counts and GPUs": "8 x 8 nodes of H100 ",
    "dotted numbers": "1.",
    "path-like": "a/",
    "CJK": "用512张H100训练",
    "negations": "no ",
}
LENGTHS = (500, 1000, 2000, 4000)


def best_ms(text: str, repeat: int = 3) -> tuple[float, str]:
    best, outcome = float("inf"), ""
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            parse_partial(text)
            outcome = "read"
        except InputError:
            outcome = "refused"
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best, outcome


def main() -> None:
    parse_partial("Llama 3 70B on 512 H100s")  # load the catalogs once
    print(f"{'input':<18}" + "".join(f"{n:>12,}" for n in LENGTHS) + "   (ms, best of 3)")
    for name, unit in KINDS.items():
        cells = [best_ms((unit * n)[:n]) for n in LENGTHS]
        print(f"{name:<18}" + "".join(f"{ms:>12.1f}" for ms, _ in cells) + f"   {cells[-1][1]}")
    for digits in (19, 3_000, 16_000, 100_000):
        ms, outcome = best_ms("Llama 3 70B on 512 H100s for " + "9" * digits + " tokens")
        print(f"a {digits:,}-digit number: {outcome} in {ms:.2f} ms")


if __name__ == "__main__":
    main()
