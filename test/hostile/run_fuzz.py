"""`make fuzz`: the long, randomized fuzz run (default 600 s; `python
test/hostile/run_fuzz.py SECONDS`). Targets take turns in rounds of 200
inputs; each crash's shrunk input is saved into fuzz_corpus/<target>/ (replayed
by test_fuzz.py in `make test`). Exits 1 when anything crashed."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from test.hostile import fuzzing  # noqa: E402


def _round(worker, target, counts):
    @settings(max_examples=200, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(fuzzing.STRATEGIES[target]())
    def run(data):
        counts[target] += 1
        fuzzing.check(worker, target, data)
    run()


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 600.0
    end = time.monotonic() + seconds
    worker = fuzzing.Worker()
    counts = {t: 0 for t in fuzzing.STRATEGIES}
    crashes = []
    try:
        while time.monotonic() < end:
            for target in fuzzing.STRATEGIES:
                if time.monotonic() >= end:
                    break

                try:
                    _round(worker, target, counts)
                except AssertionError as e:
                    path = fuzzing.save_to_corpus(target, fuzzing.LAST[target])
                    crashes.append(path)
                    print(f"CRASH {target}: saved {path}\n  {str(e).splitlines()[0][-400:]}", flush=True)
    finally:
        worker.close()
    print(f"fuzzed {seconds:g} s: " + ", ".join(f"{t} {n} inputs" for t, n in counts.items())
          + f"; {len(crashes)} crash(es)")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
