"""Feast definitions of the example: one entity, two feature views over Parquet files, one
FeatureService. Nothing here is Ferry's: ../ferry.yaml points Ferry at this repo."""

import os
from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource
from feast.types import Float32, Float64, Int64, String
from feast.value_type import ValueType

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)

user_stats = FeatureView(
    name="user_stats",
    entities=[user],
    ttl=timedelta(days=2),
    schema=[
        Field(name="txn_count_7d", dtype=Int64),
        Field(name="amount_avg_7d", dtype=Float64),
        Field(name="chargebacks_365d", dtype=Int64),
    ],
    online=True,
    source=FileSource(
        name="user_stats_source",
        path=os.path.join(DATA, "user_stats.parquet"),
        timestamp_field="event_timestamp",
    ),
)

user_profile = FeatureView(
    name="user_profile",
    entities=[user],
    ttl=timedelta(days=365),
    schema=[
        Field(name="age", dtype=Int64),
        Field(name="tier", dtype=String),
        Field(name="credit_score", dtype=Float32),
    ],
    online=True,
    source=FileSource(
        name="user_profile_source",
        path=os.path.join(DATA, "user_profile.parquet"),
        timestamp_field="event_timestamp",
    ),
)

fraud_model = FeatureService(name="fraud_model", features=[user_stats, user_profile])
