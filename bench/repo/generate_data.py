#!/usr/bin/env python3
"""Writes the benchmark data set: 100,000 users (by default), 3 feature views of 10 features each
(float32, int64, string), one Parquet file per view, Snappy-compressed. `ferry materialize` and
Feast's FileSource read the very same files.

Deterministic: the same --entities, --anchor and --seed give the same files. Every event time lies
within the last day before the anchor, well inside the views' 7-day TTL. Needs pyarrow and numpy
(the bench virtualenv has both, brought by feast).
"""

import argparse
import datetime as dt
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FLOAT_FEATURES = [
    "amount_avg_7d", "amount_avg_30d", "amount_std_30d", "amount_max_30d", "balance",
    "credit_utilization", "risk_score", "device_trust", "geo_velocity", "merchant_risk_avg",
]
INT_FEATURES = [
    "txn_count_1h", "txn_count_24h", "txn_count_7d", "txn_count_30d", "declines_7d",
    "chargebacks_365d", "distinct_merchants_30d", "distinct_devices_30d", "account_age_days",
    "days_since_last_login",
]
STRING_FEATURES = {
    "country": ["DE", "FR", "US", "GB", "ES", "IT", "NL", "PL", "SE", "BR", "IN", "JP"],
    "city": ["Berlin", "Paris", "New York", "London", "Madrid", "Milan", "Amsterdam", "Warsaw",
             "Stockholm", "Sao Paulo", "Bangalore", "Tokyo", "Munich", "Lyon", "Chicago"],
    "segment": ["retail", "small_business", "private_banking", "student", "corporate"],
    "tier": ["standard", "silver", "gold", "platinum"],
    "channel": ["mobile_app", "web", "branch", "call_center", "partner_api"],
    "device_os": ["android", "ios", "windows", "macos", "linux"],
    "browser": ["chrome", "safari", "firefox", "edge", "in_app_webview"],
    "email_domain": ["gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me",
                     "web.de", "orange.fr"],
    "kyc_level": ["none", "basic", "enhanced", "full"],
    "preferred_currency": ["EUR", "USD", "GBP", "SEK", "PLN", "BRL", "INR", "JPY"],
}
VIEWS = ("user_stats", "user_activity", "user_attrs")


def user_ids(n):
    return [f"u{i:06d}" for i in range(1, n + 1)]


def timestamps(rng, n, anchor):
    """Event times between 1 minute and 24 hours before the anchor, microsecond precision."""
    offsets_us = rng.integers(60_000_000, 86_400_000_000, size=n)
    anchor_us = int(anchor.timestamp()) * 1_000_000
    return pa.array(anchor_us - offsets_us, type=pa.timestamp("us", tz="UTC"))


def user_stats(rng, ids, anchor):
    n = len(ids)
    cols = {"user_id": ids, "event_timestamp": timestamps(rng, n, anchor)}
    scales = [500, 450, 300, 5000, 20000, 1, 1, 1, 900, 1]
    for name, scale in zip(FLOAT_FEATURES, scales):
        cols[name] = pa.array((rng.random(n) * scale).astype(np.float32), type=pa.float32())
    return pa.table(cols)


def user_activity(rng, ids, anchor):
    n = len(ids)
    cols = {"user_id": ids, "event_timestamp": timestamps(rng, n, anchor)}
    highs = [10, 60, 300, 1200, 20, 5, 200, 8, 7300, 400]
    for name, high in zip(INT_FEATURES, highs):
        cols[name] = pa.array(rng.integers(0, high, size=n), type=pa.int64())
    return pa.table(cols)


def user_attrs(rng, ids, anchor):
    n = len(ids)
    cols = {"user_id": ids, "event_timestamp": timestamps(rng, n, anchor)}
    for name, vocab in STRING_FEATURES.items():
        picks = rng.integers(0, len(vocab), size=n)
        cols[name] = pa.array([vocab[p] for p in picks], type=pa.string())
    return pa.table(cols)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entities", type=int, default=100_000, help="number of users (default 100000)")
    p.add_argument("--anchor", help="RFC 3339 time all events precede (default: now, to the second)")
    p.add_argument("--out", default=os.path.join(here, "data"), help="output folder (default: data/ here)")
    p.add_argument("--seed", type=int, default=20261122, help="random seed (default 20261122)")
    args = p.parse_args()
    if args.entities < 1:
        sys.exit("--entities must be at least 1")
    if args.anchor:
        anchor = dt.datetime.fromisoformat(args.anchor.replace("Z", "+00:00"))
        if anchor.tzinfo is None:
            sys.exit("--anchor needs a UTC offset, e.g. 2026-11-22T10:00:00Z")
    else:
        anchor = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)

    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    ids = user_ids(args.entities)
    for view, build in zip(VIEWS, (user_stats, user_activity, user_attrs)):
        pq.write_table(build(rng, ids, anchor), os.path.join(args.out, f"{view}.parquet"),
                       compression="snappy")
    print(f"wrote {args.entities} users x 3 views to {args.out} "
          f"(anchor {anchor.strftime('%Y-%m-%dT%H:%M:%SZ')})")


if __name__ == "__main__":
    main()
