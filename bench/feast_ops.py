#!/usr/bin/env python3
"""Feast side of `make bench` (run with the bench virtualenv's Python).

  feast_ops.py materialize REPO START END   materializes every view (which, in Feast 0.67, also
                                            precomputes the vectors of `scoring_precomputed`)
                                            and prints a JSON line with the timings
  feast_ops.py check REPO URL               one request per FeatureService against the running
                                            feature server (scoring_odfv with request data), to
                                            fail early on a broken setup
  feast_ops.py sdk REPO BATCH DURATION WARMUP ID_SPACE
                                            Feast's in-process SDK call (the figure Feast
                                            publishes): get_online_features of the precomputed
                                            service on the same Redis, one call at a time, timed
                                            here; prints one row in ferry-bench's format
"""

import datetime as dt
import json
import sys
import time
import urllib.request


def materialize(repo, start, end):
    from feast import FeatureStore

    store = FeatureStore(repo_path=repo)
    timings = {"precompute_s": 0.0, "precomputed": 0}
    precompute = store.precompute_feature_service

    def timed_precompute(*args, **kwargs):
        t = time.perf_counter()
        n = precompute(*args, **kwargs)
        timings["precompute_s"] += time.perf_counter() - t
        timings["precomputed"] += n
        return n

    # Feast calls this at the end of materialize() for every precompute_online service.
    store.precompute_feature_service = timed_precompute
    t0 = time.perf_counter()
    store.materialize(dt.datetime.fromisoformat(start), dt.datetime.fromisoformat(end))
    total = time.perf_counter() - t0
    timings["total_s"] = total
    timings["views_s"] = total - timings["precompute_s"]
    print(json.dumps(timings))


def check(url):
    for service in ("scoring_precomputed", "scoring"):
        body = json.dumps({"feature_service": service, "entities": {"user_id": ["u000001", "u000002"]},
                           "full_feature_names": True}).encode()
        req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            doc = json.load(r)
        names = doc["metadata"]["feature_names"]
        statuses = [s for res in doc["results"] for s in res["statuses"]]
        present = sum(1 for s in statuses if s == "PRESENT")
        print(f"feast {service}: {len(names)} columns, {present}/{len(statuses)} values PRESENT")
        if len(names) != 31 or present != len(statuses):
            sys.exit(f"feast {service} answered unexpectedly: {json.dumps(doc)[:600]}")
    # The on-demand feature view `risk` (python mode) on the request's amount and channel.
    # Short names: Feast 0.67 answers no column of a python-mode ODFV under full names.
    body = json.dumps({"feature_service": "scoring_odfv", "full_feature_names": False,
                       "entities": {"user_id": ["u000001", "u000002"], "amount": [120.5, 3.0],
                                    "request_channel": ["web", "web"]}}).encode()
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        doc = json.load(r)
    names = doc["metadata"]["feature_names"]
    odfv = {"amount_over_avg_7d", "over_max_30d", "amount_z_30d", "other_channel", "declines_per_txn"}
    risk = {n: res["values"] for n, res in zip(names, doc["results"]) if n in odfv}
    print(f"feast scoring_odfv: {len(names)} columns, risk: {json.dumps(risk)}")
    if len(risk) != 5 or any(v is None for vals in risk.values() for v in vals):
        sys.exit(f"feast scoring_odfv answered unexpectedly: {json.dumps(doc)[:600]}")


def sdk(repo, batch, duration, warmup, id_space):
    """Closed loop, one caller: each call asks for `batch` random users (uniform in the id
    space, as ferry-bench picks them) and converts the answer to a dict, as a caller would."""
    import random
    from feast import FeatureStore

    store = FeatureStore(repo_path=repo)
    service = store.get_feature_service("scoring_precomputed")
    rng = random.Random(batch)

    def call():
        rows = [{"user_id": f"u{rng.randint(1, id_space):06d}"} for _ in range(batch)]
        return store.get_online_features(features=service, entity_rows=rows,
                                         full_feature_names=True).to_dict()

    answer = call()
    filled = sum(1 for col in answer.values() for v in col if v is not None)
    if len(answer) != 31 or filled == 0 or any(len(col) != batch for col in answer.values()):
        sys.exit(f"feast sdk answered unexpectedly: {json.dumps(answer, default=str)[:600]}")
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        call()
    samples = []
    t0 = time.perf_counter()
    end = t0 + duration
    while time.perf_counter() < end:
        s = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - s) // 1000)
    elapsed = time.perf_counter() - t0
    samples.sort()

    def q(x):
        return samples[min(len(samples) - 1, int(x * len(samples)))]

    print(json.dumps({
        "scenario": "feast_sdk", "batch": batch, "connections": 1, "rate": None,
        "p50_us": q(0.50), "p90_us": q(0.90), "p99_us": q(0.99), "p999_us": q(0.999),
        "max_us": samples[-1], "mean_us": round(sum(samples) / len(samples), 1),
        "rps": round(len(samples) / elapsed, 1), "errors": 0, "requests": len(samples),
        "dropped": 0, "duration_s": elapsed,
    }))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "materialize":
        materialize(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[3])
    elif len(sys.argv) == 7 and sys.argv[1] == "sdk":
        sdk(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
