"""Feast definitions of the benchmark data set: the same entity, views and Parquet files as
../repo/ferry.yaml, and two FeatureServices over all three views: `scoring_precomputed`
(precompute_online=True: one blob per entity, one read per entity) and `scoring` (Feast's regular
per-view reads). `make bench` points FEAST_BENCH_DATA at the generated data folder."""

import os
from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource
from feast.types import Float32, Int64, String
from feast.value_type import ValueType

DATA = os.environ.get(
    "FEAST_BENCH_DATA",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "repo", "data"),
)

FLOAT_FEATURES = [
    "amount_avg_7d", "amount_avg_30d", "amount_std_30d", "amount_max_30d", "balance",
    "credit_utilization", "risk_score", "device_trust", "geo_velocity", "merchant_risk_avg",
]
INT_FEATURES = [
    "txn_count_1h", "txn_count_24h", "txn_count_7d", "txn_count_30d", "declines_7d",
    "chargebacks_365d", "distinct_merchants_30d", "distinct_devices_30d", "account_age_days",
    "days_since_last_login",
]
STRING_FEATURES = [
    "country", "city", "segment", "tier", "channel", "device_os", "browser", "email_domain",
    "kyc_level", "preferred_currency",
]

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)


def view(name, features, dtype):
    return FeatureView(
        name=name,
        entities=[user],
        ttl=timedelta(days=7),
        schema=[Field(name=f, dtype=dtype) for f in features],
        online=True,
        source=FileSource(
            name=f"{name}_source",
            path=os.path.abspath(os.path.join(DATA, f"{name}.parquet")),
            timestamp_field="event_timestamp",
        ),
    )


user_stats = view("user_stats", FLOAT_FEATURES, Float32)
user_activity = view("user_activity", INT_FEATURES, Int64)
user_attrs = view("user_attrs", STRING_FEATURES, String)

scoring_precomputed = FeatureService(
    name="scoring_precomputed",
    features=[user_stats, user_activity, user_attrs],
    precompute_online=True,
)

scoring = FeatureService(
    name="scoring",
    features=[user_stats, user_activity, user_attrs],
)
