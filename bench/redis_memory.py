#!/usr/bin/env python3
"""Redis bytes per entity of both layouts, from `MEMORY USAGE` (SAMPLES 0: exact) on a sample of
keys. Ferry (db 0): one string per entity per FeatureService, typed values only. Feast (db 1):
one hash per entity holding each view's features (a field per feature + a timestamp per view)
and, with precompute_online, the blob of the precomputed vector in a field of the same hash.
Prints one JSON object."""

import argparse
import json
import statistics

import redis
from feast.infra.online_stores.helpers import _mmh3

SERVICE = "scoring_precomputed"


def sample(client, pattern, n):
    keys = []
    for k in client.scan_iter(match=pattern, count=1000):
        keys.append(k)
        if len(keys) >= n:
            break
    return keys


def mean(xs):
    return round(statistics.fmean(xs), 1) if xs else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fingerprint", required=True)
    p.add_argument("--sample", type=int, default=2000)
    args = p.parse_args()

    ferry = redis.Redis(host="127.0.0.1", port=args.port, db=0)
    keys = sample(ferry, f"ferry:bench:scoring:{args.fingerprint}:*", args.sample)
    ferry_usage = [ferry.memory_usage(k, samples=0) for k in keys]
    ferry_values = [ferry.strlen(k) for k in keys]

    feast = redis.Redis(host="127.0.0.1", port=args.port, db=1)
    hashes = sample(feast, "*", args.sample)
    blob_field = _mmh3(f"__precomputed__{SERVICE}:vector")
    feast_usage, blob_len, fields, values_len = [], [], [], []
    for h in hashes:
        if feast.type(h) != b"hash":
            continue
        feast_usage.append(feast.memory_usage(h, samples=0))
        blob_len.append(feast.hstrlen(h, blob_field))
        entry = feast.hgetall(h)
        fields.append(len(entry))
        values_len.append(sum(len(v) for f, v in entry.items() if f != blob_field))

    out = {
        "sampled_keys": {"ferry": len(keys), "feast": len(feast_usage)},
        "ferry_keys_total": ferry.dbsize(),
        "feast_keys_total": feast.dbsize(),
        # Everything Redis holds for one entity's vector: key, value, object overhead.
        "ferry_key_bytes": mean(ferry_usage),
        "ferry_value_bytes": mean(ferry_values),
        "ferry_key_name_bytes": mean([len(k) for k in keys]),
        # Feast's whole per-entity hash (per-view fields + the precomputed blob).
        "feast_hash_bytes": mean(feast_usage),
        "feast_hash_fields": mean(fields),
        # The precomputed blob alone (a PrecomputedFeatureVector: names + values + timestamps).
        "feast_precomputed_blob_bytes": mean(blob_len),
        # The per-view part alone (values + view timestamps, without field names).
        "feast_per_view_value_bytes": mean(values_len),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
