"""How long the Ray driver's main thread spends in each hand-over (``RayCounter._take``: the node
counters' sums taken in, in parts, while no unit is sent or acknowledged), on a local cluster of 2
CPUs, for one flush window length: what an asynchronous hand-over could hide at most.

    python bench/bench_ray_take.py CORPUS DB FLUSH_SECONDS     # one JSON line
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import ray

    from bpe_store.counting import ray_count
    from bpe_store.counting.count import RangeTask, count_unit_packed
    from bpe_store.text.pretokenize import GPT2_PATTERN, PretokenSpec
    from bpe_store.training.train import train

    corpus, db, flush_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    warm = ray.remote(num_cpus=1)(count_unit_packed)
    ray.get([warm.remote(RangeTask(0, corpus, 0, 1, PretokenSpec((), GPT2_PATTERN))) for _ in range(4)])
    takes: list[float] = []
    real = ray_count.RayCounter._take

    def timed(self) -> None:
        t = time.monotonic()
        real(self)
        takes.append(time.monotonic() - t)

    ray_count.RayCounter._take = timed
    at: dict[str, float] = {}

    def progress(e: dict) -> None:
        if e["stage"] in ("counting", "pairs"):
            at.setdefault(e["stage"], time.monotonic())

    train([corpus], db, 268, ["<|endoftext|>"], count_engine="ray", count_flush_seconds=flush_s, progress=progress)
    print(json.dumps({"flush_s": flush_s, "counting_wall": round(at["pairs"] - at["counting"], 2),
                      "takes": [round(x, 3) for x in takes], "in_takes": round(sum(takes), 3)}))


if __name__ == "__main__":
    main()
