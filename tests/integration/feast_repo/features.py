# A small Feast repo for Ferry's Feast-layout tests: string, int64 and composite entity keys,
# a view with a short ttl, and a service with precompute_online. `make_data.py` writes its
# parquet files; the test writes feature_store.yaml (it holds the test Redis's port).
from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Float32, Float64, Int64, String

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
merchant = Entity(name="merchant", join_keys=["merchant_id"], value_type=ValueType.INT64)


def file_source(name):
    return FileSource(path=f"data/{name}.parquet", timestamp_field="event_timestamp")


def view(name, entities, schema, ttl=timedelta(days=3650), source=None):
    """A view over its own parquet file, data/NAME.parquet, unless given another source."""
    source = source or file_source(name)
    return FeatureView(name=name, entities=entities, ttl=ttl, schema=schema, source=source)


user_profile = view(
    "user_profile",
    [user],
    [
        Field(name="age", dtype=Int64),
        Field(name="credit_score", dtype=Float32),
        Field(name="segment", dtype=String),
    ],
)

# ttl of one hour: the test writes one user's row two hours old, so Feast and Ferry both
# report it OUTSIDE_MAX_AGE.
user_recent = view(
    "user_recent", [user], [Field(name="clicks_1h", dtype=Int64)], ttl=timedelta(hours=1)
)
merchant_stats = view("merchant_stats", [merchant], [Field(name="chargeback_rate", dtype=Float64)])
user_merchant = view("user_merchant", [user, merchant], [Field(name="txn_count", dtype=Int64)])

scoring = FeatureService(
    name="scoring", features=[user_profile, user_recent], precompute_online=True
)
merchant_risk = FeatureService(name="merchant_risk", features=[merchant_stats])
pair = FeatureService(name="pair", features=[user_merchant])
