# Writes the ODFV fixture's parquet file (argument: the repo folder): u1 and u2 with every
# input, u3 with a null avg_amount.
import sys
from datetime import datetime, timedelta, timezone

import pandas as pd

repo = sys.argv[1]
fresh = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
pd.DataFrame({
    "user_id": ["u1", "u2", "u3"],
    "avg_amount": pd.array([40.0, 125.5, None], dtype="Float64"),
    "txn_count": [3, 4, 2],
    "event_timestamp": [fresh, fresh, fresh],
}).to_parquet(f"{repo}/data/user_stats.parquet")
