"""Writes the example's Parquet files into data/: user_stats and user_profile for users
u0001..u1000 (every 10th user has no user_stats row, every 7th a null credit score), event times
within the last day. Run with the Feast virtualenv's Python (pandas, pyarrow)."""

import os
import random
from datetime import datetime, timedelta, timezone

import pandas as pd

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def main(users=1000):
    rng = random.Random(7)
    now = datetime.now(timezone.utc)
    ids = [f"u{i:04d}" for i in range(1, users + 1)]
    when = lambda: now - timedelta(seconds=rng.randint(60, 86_000))  # noqa: E731
    stats = [
        {
            "user_id": u,
            "event_timestamp": when(),
            "txn_count_7d": rng.randint(0, 60),
            "amount_avg_7d": round(rng.uniform(5, 400), 2),
            "chargebacks_365d": rng.choice([0, 0, 0, 1, 2]),
        }
        for i, u in enumerate(ids, 1)
        if i % 10 != 0
    ]
    profile = [
        {
            "user_id": u,
            "event_timestamp": when(),
            "age": rng.randint(18, 90),
            "tier": rng.choice(["standard", "gold", "platinum"]),
            "credit_score": None if i % 7 == 0 else round(rng.uniform(300, 850), 1),
        }
        for i, u in enumerate(ids, 1)
    ]
    os.makedirs(OUT, exist_ok=True)
    pd.DataFrame(stats).to_parquet(os.path.join(OUT, "user_stats.parquet"), index=False)
    frame = pd.DataFrame(profile).astype({"credit_score": "float32"})
    frame.to_parquet(os.path.join(OUT, "user_profile.parquet"), index=False)
    print(f"wrote {len(stats)} user_stats and {len(profile)} user_profile rows to {OUT}")


if __name__ == "__main__":
    main()
