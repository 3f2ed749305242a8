# A small Feast repo for Ferry's Feast-layout tests: string, int64 and composite entity keys,
# a view with a short ttl, and a service with precompute_online. `make_data.py` writes its
# parquet files; the test writes feature_store.yaml (it holds the test Redis's port).
from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Float32, Float64, Int64, String

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
merchant = Entity(name="merchant", join_keys=["merchant_id"], value_type=ValueType.INT64)


def source(name):
    return FileSource(path=f"data/{name}.parquet", timestamp_field="event_timestamp")


user_profile = FeatureView(
    name="user_profile",
    entities=[user],
    ttl=timedelta(days=3650),
    schema=[
        Field(name="age", dtype=Int64),
        Field(name="credit_score", dtype=Float32),
        Field(name="segment", dtype=String),
    ],
    source=source("user_profile"),
)

# ttl of one hour: the test writes one user's row two hours old, so Feast and Ferry both
# report it OUTSIDE_MAX_AGE.
user_recent = FeatureView(
    name="user_recent",
    entities=[user],
    ttl=timedelta(hours=1),
    schema=[Field(name="clicks_1h", dtype=Int64)],
    source=source("user_recent"),
)

merchant_stats = FeatureView(
    name="merchant_stats",
    entities=[merchant],
    ttl=timedelta(days=3650),
    schema=[Field(name="chargeback_rate", dtype=Float64)],
    source=source("merchant_stats"),
)

user_merchant = FeatureView(
    name="user_merchant",
    entities=[user, merchant],
    ttl=timedelta(days=3650),
    schema=[Field(name="txn_count", dtype=Int64)],
    source=source("user_merchant"),
)

scoring = FeatureService(
    name="scoring", features=[user_profile, user_recent], precompute_online=True
)
merchant_risk = FeatureService(name="merchant_risk", features=[merchant_stats])
pair = FeatureService(name="pair", features=[user_merchant])
