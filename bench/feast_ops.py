#!/usr/bin/env python3
"""Feast side of `make bench` (run with the bench virtualenv's Python).

  feast_ops.py materialize REPO START END   materializes every view (which, in Feast 0.67, also
                                            precomputes the vectors of `scoring_precomputed`)
                                            and prints a JSON line with the timings
  feast_ops.py check REPO URL               one request per FeatureService against the running
                                            feature server, to fail early on a broken setup
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


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "materialize":
        materialize(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
