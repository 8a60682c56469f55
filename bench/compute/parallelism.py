"""How much of the machine's parallelism a job can get right now: the same GIL-free work
(single-threaded float64 matrix products) run twice one after the other, then on two threads
at once. On an idle 2-core machine the speedup is about 2; on a shared one it says how much
any 2-worker engine can gain over one process at that moment (read real.py's figures with it).

    python bench/compute/parallelism.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

os.environ.setdefault(
    "OPENBLAS_NUM_THREADS", "1"
)  # one core per product, as in real.py

import numpy as np


def speedup(rounds: int) -> list[float]:
    a = np.random.default_rng(0).normal(size=(500, 500))

    def work() -> None:
        for _ in range(20):
            a @ a

    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        work()
        work()
        seq = time.perf_counter() - t0
        ts = [threading.Thread(target=work) for _ in range(2)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out.append(round(seq / (time.perf_counter() - t0), 2))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    runs = speedup(ap.parse_args().rounds)
    print(json.dumps({"two_thread_speedup": runs, "median": statistics.median(runs),
                      "loadavg": os.getloadavg()}))  # fmt: skip


if __name__ == "__main__":
    main()
