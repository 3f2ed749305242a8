# Writes the Feast repo's parquet files (argument: the repo folder). Ages are relative to now so
# that the short-ttl view has one fresh and one expired row whenever the test runs.
import sys
from datetime import datetime, timedelta, timezone

import pandas as pd

repo = sys.argv[1]
now = datetime.now(timezone.utc).replace(microsecond=0)
fresh, old = now - timedelta(minutes=5), now - timedelta(hours=2)


def write(name, rows):
    pd.DataFrame(rows).to_parquet(f"{repo}/data/{name}.parquet")


write("user_profile", {
    "user_id": ["u1", "u2", "u3"],
    "age": [34, 51, 27],
    "credit_score": pd.array([0.75, 0.5, None], dtype="Float32"),
    "segment": ["gold", None, "silver"],
    # Not in the first schema: the hot-change test adds it with a second `feast apply`.
    "tier": [1, 2, 3],
    "event_timestamp": [fresh, fresh, fresh],
})
write("user_recent", {
    "user_id": ["u1", "u2"],
    "clicks_1h": [12, 3],
    "event_timestamp": [fresh, old],
})
write("merchant_stats", {
    "merchant_id": [7, 9],
    "chargeback_rate": [0.01, 0.2],
    "event_timestamp": [fresh, fresh],
})
write("user_merchant", {
    "user_id": ["u1", "u2"],
    "merchant_id": [7, 9],
    "txn_count": [5, 1],
    "event_timestamp": [fresh, fresh],
})
