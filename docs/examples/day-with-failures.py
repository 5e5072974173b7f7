"""A working day of one monorepo's pipelines as a replay, failures included, for the book's
"Failed jobs" example (docs/src/scaling/replay.md).

Each push builds once (3-6 min), fans out to eight test jobs (4-12 min) once the build has
passed, and, on four pipelines in ten (the default branch's), then packages and reports (two
jobs of 1-3 min). 15 % of builds fail part-way, and then nothing follows them; in 10 % of the
pipelines that reach the tests one test job fails, and then no deploy stage follows. Pushes
come at 20 an hour from 8 to 12 h and from 13:30 to 17:30, 8 an hour at lunch, 2 in the
evening and 1 at night. Every job is ready when the jobs before it have ended, as if none
waited for a machine. Usage: python3 day-with-failures.py SEED > day.tsv
"""

import datetime
import random
import sys

BUILD_FAILS = 0.15
A_TEST_FAILS = 0.10
DEPLOYS = 0.4
PEAK_PER_HOUR = 20


def pushes_per_hour(hour):
    if 8 <= hour < 12 or 13.5 <= hour < 17.5:
        return 20
    if 12 <= hour < 13.5:
        return 8
    if 17.5 <= hour < 22:
        return 2
    return 1


def pipeline(rng, pipeline_id, created):
    """The jobs of one pipeline: (ready s, duration s, pipeline, stage, name, status)."""
    build = rng.uniform(180, 360)
    if rng.random() < BUILD_FAILS:
        return [(created, build * rng.uniform(0.1, 1), pipeline_id, "build", "compile", "failed")]
    jobs = [(created, build, pipeline_id, "build", "compile", "success")]
    tested = created + build
    runs = [rng.uniform(240, 720) for _ in range(8)]
    failing = rng.randrange(8) if rng.random() < A_TEST_FAILS else None
    for i, run in enumerate(runs):
        status = "failed" if i == failing else "success"
        jobs.append((tested, run, pipeline_id, "test", f"rspec {i + 1}/8", status))
    if failing is not None or rng.random() >= DEPLOYS:
        return jobs
    deployed = tested + max(runs)
    for name in ("package", "report"):
        jobs.append((deployed, rng.uniform(60, 180), pipeline_id, "deploy", name, "success"))
    return jobs


def main():
    rng = random.Random(int(sys.argv[1]))
    start = datetime.datetime(2026, 11, 23, tzinfo=datetime.timezone.utc)
    jobs, t, pipeline_id = [], 0.0, 1000
    while True:
        # Poisson pushes at the peak rate, thinned to the hour's rate.
        t += rng.expovariate(PEAK_PER_HOUR / 3600)
        if t >= 86400:
            break
        if rng.random() > pushes_per_hour(t / 3600) / PEAK_PER_HOUR:
            continue
        pipeline_id += 1
        jobs.extend(pipeline(rng, pipeline_id, t))
    print("ready\tduration\tproject\tpipeline\tstage\tname\tclass\tstatus")
    for ready, duration, pid, stage, name, status in sorted(jobs):
        at = (start + datetime.timedelta(seconds=ready)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        print(f"{at}\t{duration:.1f}\tmono\t{pid}\t{stage}\t{name}\tdefault\t{status}")


main()
