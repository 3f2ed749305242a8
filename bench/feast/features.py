"""Feast definitions of the benchmark data set: the same entity, views and Parquet files as
../repo/ferry.yaml, and FeatureServices over all three views: `scoring_precomputed`
(precompute_online=True: one blob per entity, one read per entity), `scoring` (Feast's regular
per-view reads) and `scoring_odfv` (the same reads plus the on-demand feature view `risk` in
Feast's `python` mode: the five features of ../repo_od/ferry.yaml's `risk`, from the request's
`amount` and `channel`). `make bench` points FEAST_BENCH_DATA at the generated data folder."""

import os
from datetime import timedelta

from typing import Any

from feast import Entity, FeatureService, FeatureView, Field, FileSource, RequestSource
from feast.on_demand_feature_view import on_demand_feature_view
from feast.types import Bool, Float32, Float64, Int64, String
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

# The request data of scenario feast_odfv: Feast takes it as extra columns of the entity rows.
# Its channel is `request_channel` here, apart from the stored feature user_attrs.channel:
# python mode's inputs are keyed by bare names (Ferry's CEL reads request.channel and
# user_attrs.channel).
txn = RequestSource(
    name="txn",
    schema=[Field(name="amount", dtype=Float64), Field(name="request_channel", dtype=String)],
)


@on_demand_feature_view(
    sources=[user_stats, user_activity, user_attrs, txn],
    schema=[
        Field(name="amount_over_avg_7d", dtype=Float64),
        Field(name="over_max_30d", dtype=Bool),
        Field(name="amount_z_30d", dtype=Float64),
        Field(name="other_channel", dtype=Bool),
        Field(name="declines_per_txn", dtype=Float64),
    ],
    mode="python",
)
def risk(inputs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    # ../repo_od/ferry.yaml's CEL, per entity row (python mode, one list per column). Feast runs
    # the function's source alone: no module-level names inside it. A null input or a division
    # by zero gives None (Ferry: null, or INVALID).
    def div(a, b):
        return None if a is None or b is None or b == 0 else a / b

    out: dict[str, list[Any]] = {k: [] for k in (
        "amount_over_avg_7d", "over_max_30d", "amount_z_30d", "other_channel", "declines_per_txn")}
    rows = zip(inputs["amount"], inputs["request_channel"], inputs["amount_avg_7d"],
               inputs["amount_max_30d"], inputs["amount_avg_30d"], inputs["amount_std_30d"],
               inputs["channel"], inputs["declines_7d"], inputs["txn_count_7d"])
    for amount, channel, avg7, max30, avg30, std30, stored_channel, declines, count in rows:
        out["amount_over_avg_7d"].append(div(amount, avg7))
        out["over_max_30d"].append(None if max30 is None else amount > max30)
        out["amount_z_30d"].append(div(None if avg30 is None else amount - avg30, std30))
        out["other_channel"].append(None if stored_channel is None else channel != stored_channel)
        out["declines_per_txn"].append(
            None if declines is None or count is None else declines / (count + 1))
    return out


scoring_odfv = FeatureService(
    name="scoring_odfv",
    features=[user_stats, user_activity, user_attrs, risk],
)
