# Feast 0.67 side of bench/push.sh: user_stats (10 float32 features, as in ../feast/) fed by a
# PushSource, so `feast serve`'s /push writes it. ${FEAST_BENCH_*} as in ../feast/.
import os
from datetime import timedelta

from feast import Entity, FeatureView, Field, FileSource, PushSource
from feast.types import Float32
from feast.value_type import ValueType

DATA = os.environ["FEAST_BENCH_DATA"]
FLOAT_FEATURES = [
    "amount_avg_7d", "amount_avg_30d", "amount_std_30d", "amount_max_30d", "balance",
    "credit_utilization", "risk_score", "device_trust", "geo_velocity", "merchant_risk_avg",
]

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)

stats_push = PushSource(
    name="stats_push",
    batch_source=FileSource(
        name="user_stats_source",
        path=os.path.abspath(os.path.join(DATA, "user_stats.parquet")),
        timestamp_field="event_timestamp",
    ),
)

user_stats = FeatureView(
    name="user_stats",
    entities=[user],
    ttl=timedelta(days=7),
    schema=[Field(name=f, dtype=Float32) for f in FLOAT_FEATURES],
    online=True,
    source=stats_push,
)
