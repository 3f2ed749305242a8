#!/usr/bin/env python3
"""Writes the banking example's source files (CSV) for `ferry materialize`.

Deterministic: the same --entities, --anchor and --seed always give the same files. Every event
time lies before the anchor and within its view's TTL, except on purpose:
  - users whose index % 50 == 7 have their latest transactions row 2 days old (stale under 1d);
  - users whose index % 100 == 42 have no transactions row at all;
  - user_merchant: users whose index % 100 == 42 have no (user, merchant) pair; the first pair of
    users whose index % 50 == 7 is 15 days old (stale under 14d);
  - merchant_profile: merchants whose index % 50 == 13 have no row;
  - user_sessions: users whose index % 100 == 42 have no row, and users whose index % 20 == 9
    an empty last_login_at (null).
The merchant and session files come from their own random streams, so adding them left the
earlier files as they were. Python 3 standard library only.
"""

import argparse
import csv
import datetime as dt
import os
import random
import sys

TIERS = ["standard", "silver", "gold", "platinum"]
MERCHANT_CATEGORIES = ["grocery", "fuel", "travel", "electronics", "restaurants", "gambling", "pharmacy"]
COUNTRIES = ["DE", "FR", "NL", "ES", "IT", "PL"]
EMBEDDING_DIM = 8
PLUS_TWO = dt.timezone(dt.timedelta(hours=2))


def parse_anchor(text):
    anchor = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if anchor.tzinfo is None:
        sys.exit("--anchor needs a UTC offset, e.g. 2026-11-21T10:00:00Z")
    return anchor.astimezone(dt.timezone.utc)


def rfc3339(t, rng):
    """Mostly UTC with a Z; some rows in +02:00 with milliseconds, to exercise both spellings."""
    if rng.random() < 0.2:
        t = t.replace(microsecond=(t.microsecond // 1000) * 1000)
        return t.astimezone(PLUS_TWO).isoformat(timespec="milliseconds")
    return t.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(anchor, rng, low, high):
    """A time between `low` and `high` before the anchor."""
    span = (high - low).total_seconds()
    return anchor - low - dt.timedelta(seconds=rng.uniform(0, span))


def merchant_id(j):
    return 1000 + j  # int64 join key: 1001, 1002, ...


def user_merchants(i, merchants):
    """The merchants user i has bought from: 1 to 3, a fixed function of i (no randomness), so
    a present pair is known without reading the data, e.g. u000001 with 1038 and 1139."""
    if has_no_transactions(i):
        return []
    out = []
    for k in range(1 + i % 3):
        j = (i * 37 + k * 101) % merchants + 1
        if j not in out:
            out.append(j)
    return [merchant_id(j) for j in out]


def user_id(i):
    return f"u{i:06d}"


def is_stale(i):
    return i % 50 == 7


def has_no_transactions(i):
    return i % 100 == 42


def profiles(n, anchor, rng):
    rows = []
    for i in range(1, n + 1):
        t = ago(anchor, rng, dt.timedelta(hours=1), dt.timedelta(days=300))
        versions = [t]
        if i % 10 == 3:  # an older profile version that must lose to the newer one
            versions.append(t - dt.timedelta(days=rng.uniform(1, 30)))
        for v in versions:
            credit = "" if i % 97 == 5 else f"{rng.uniform(300, 850):.1f}"
            rows.append([
                user_id(i), rfc3339(v, rng), rng.randint(18, 90), credit,
                rng.choice(TIERS), rng.choice(["true", "false"]), rng.randint(1, 3650),
            ])
    return rows


def transactions(n, anchor, rng):
    rows = []
    for i in range(1, n + 1):
        if has_no_transactions(i):
            continue
        if is_stale(i):
            latest = ago(anchor, rng, dt.timedelta(days=2), dt.timedelta(days=2, hours=6))
        else:
            latest = ago(anchor, rng, dt.timedelta(minutes=1), dt.timedelta(hours=20))
        times = [latest]
        for _ in range(rng.randint(1, 2)):
            times.append(times[-1] - dt.timedelta(days=rng.uniform(1, 3)))
        for t in times:
            count = rng.randint(0, 60)
            avg = round(rng.uniform(5, 500), 2) if count else ""
            rows.append([
                user_id(i), rfc3339(t, rng), count, avg,
                f"{rng.uniform(1, 2000):.2f}", rng.choice(["true", "false", "false", "false"]),
            ])
    # Rows in no particular order: the latest row per user must win wherever it is.
    rng.shuffle(rows)
    return rows


def embeddings(n, anchor, rng):
    rows = []
    for i in range(1, n + 1):
        t = ago(anchor, rng, dt.timedelta(hours=1), dt.timedelta(days=25))
        vec = ", ".join(f"{rng.gauss(0, 1):.4f}" for _ in range(EMBEDDING_DIM))
        rows.append([user_id(i), int(t.timestamp()), f"[{vec}]"])  # epoch seconds
    return rows


def user_merchant(n, merchants, anchor, rng):
    rows = []
    for i in range(1, n + 1):
        for k, m in enumerate(user_merchants(i, merchants)):
            if k == 0 and is_stale(i):
                latest = ago(anchor, rng, dt.timedelta(days=15), dt.timedelta(days=16))
            else:
                latest = ago(anchor, rng, dt.timedelta(hours=1), dt.timedelta(days=10))
            times = [latest]
            if rng.random() < 0.3:  # an older row that must lose to the newer one
                times.append(latest - dt.timedelta(days=rng.uniform(1, 5)))
            for t in times:
                count = rng.randint(1, 40)
                rows.append([
                    user_id(i), m, rfc3339(t, rng), count,
                    f"{count * rng.uniform(3, 300):.2f}", rng.randint(0, 29),
                ])
    rng.shuffle(rows)
    return rows


def merchant_profile(merchants, anchor, rng):
    rows = []
    for j in range(1, merchants + 1):
        if j % 50 == 13:
            continue
        t = ago(anchor, rng, dt.timedelta(hours=1), dt.timedelta(days=60))
        rows.append([
            merchant_id(j), rfc3339(t, rng), rng.choice(MERCHANT_CATEGORIES),
            f"{rng.betavariate(2, 8):.3f}", rng.choice(["true", "false"]),
        ])
    return rows


def sessions(n, anchor, rng):
    """One row per user: when they last logged in (Unix seconds, an int64 feature for
    `request.time - user_sessions.last_login_at`) and from which country."""
    rows = []
    for i in range(1, n + 1):
        if has_no_transactions(i):
            continue
        login = ago(anchor, rng, dt.timedelta(minutes=1), dt.timedelta(days=7))
        last_login = "" if i % 20 == 9 else int(login.timestamp())
        country = rng.choice(COUNTRIES)
        rows.append([user_id(i), rfc3339(login, rng), last_login, country])
    return rows


def write(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entities", type=int, default=10000, help="number of users (default 10000)")
    p.add_argument("--anchor", help="RFC 3339 time all events precede (default: now, to the second)")
    p.add_argument("--out", default=os.path.join(here, "data"), help="output folder (default: data/ next to this script)")
    p.add_argument("--seed", type=int, default=20261121, help="random seed (default 20261121)")
    p.add_argument("--merchants", type=int, default=500, help="number of merchants (default 500)")
    args = p.parse_args()
    if args.entities < 1:
        sys.exit("--entities must be at least 1")
    if args.merchants < 1:
        sys.exit("--merchants must be at least 1")
    if args.anchor:
        anchor = parse_anchor(args.anchor)
    else:
        anchor = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)

    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    n = args.entities
    write(os.path.join(args.out, "user_profile.csv"),
          ["user_id", "event_timestamp", "age", "credit_score", "account_tier", "is_verified", "signup_days"],
          profiles(n, anchor, rng))
    write(os.path.join(args.out, "transactions.csv"),
          ["user_id", "event_timestamp", "txn_count_7d", "txn_amount_avg_7d", "last_txn_amount", "has_chargeback"],
          transactions(n, anchor, rng))
    write(os.path.join(args.out, "user_embedding.csv"),
          ["user_id", "event_timestamp", "embedding"],
          embeddings(n, anchor, rng))
    # The merchant files use their own stream: the user files above stay as they always were.
    mrng = random.Random(f"{args.seed}/merchants")
    pairs = user_merchant(n, args.merchants, anchor, mrng)
    write(os.path.join(args.out, "user_merchant.csv"),
          ["user_id", "merchant_id", "event_timestamp", "txn_count_30d", "amount_sum_30d", "last_seen_days"],
          pairs)
    write(os.path.join(args.out, "merchant_profile.csv"),
          ["merchant_id", "event_timestamp", "category", "risk_score", "is_online"],
          merchant_profile(args.merchants, anchor, mrng))
    srng = random.Random(f"{args.seed}/sessions")
    write(os.path.join(args.out, "user_sessions.csv"),
          ["user_id", "event_timestamp", "last_login_at", "login_country"],
          sessions(n, anchor, srng))
    stale = sum(1 for i in range(1, n + 1) if is_stale(i))
    missing = sum(1 for i in range(1, n + 1) if has_no_transactions(i))
    print(f"wrote {n} users to {args.out} (anchor {anchor.strftime('%Y-%m-%dT%H:%M:%SZ')}; "
          f"{stale} with stale transactions, {missing} without transactions; "
          f"{args.merchants} merchants, {sum(len(user_merchants(i, args.merchants)) for i in range(1, n + 1))} "
          f"(user, merchant) pairs)")


if __name__ == "__main__":
    main()
