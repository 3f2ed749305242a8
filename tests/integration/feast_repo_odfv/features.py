# A small Feast repo with an on-demand feature view in Feast's `python` mode, for
# tests/integration/tests/feast_odfv.rs: Feast computes it with this Python; Ferry computes the
# same features from the CEL the test's ferry.yaml gives (`feast: {on_demand: ...}`), inside
# Envoy. `make_data.py` writes the parquet file; the test writes feature_store.yaml.
from datetime import timedelta
from typing import Any

from feast import Entity, FeatureService, FeatureView, Field, FileSource, RequestSource, ValueType
from feast.on_demand_feature_view import on_demand_feature_view
from feast.types import Bool, Float64, Int64

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)

user_stats = FeatureView(
    name="user_stats",
    entities=[user],
    ttl=timedelta(days=3650),
    schema=[
        Field(name="avg_amount", dtype=Float64),
        Field(name="txn_count", dtype=Int64),
    ],
    source=FileSource(path="data/user_stats.parquet", timestamp_field="event_timestamp"),
)

# The request data: Feast takes it as extra columns of the entity rows.
txn = RequestSource(
    name="txn",
    schema=[Field(name="amount", dtype=Float64), Field(name="delta", dtype=Int64)],
)


@on_demand_feature_view(
    sources=[user_stats, txn],
    schema=[
        Field(name="amount_ratio", dtype=Float64),
        Field(name="big_spender", dtype=Bool),
        Field(name="delta_per_txn", dtype=Int64),
        Field(name="delta_mod_txn", dtype=Int64),
        # The same two again: Ferry's CEL for these writes Python's floor out (docs/feast.md).
        Field(name="delta_per_txn_floor", dtype=Int64),
        Field(name="delta_mod_txn_floor", dtype=Int64),
    ],
    mode="python",
)
def txn_features(inputs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    # Python mode: one list per column, one element per entity row. A null stored input gives
    # a null output (Python would raise on None). (Feast 0.67's singleton=True computes only
    # the first row of a batch online, so the list form is used.)
    rows = zip(inputs["avg_amount"], inputs["txn_count"], inputs["amount"], inputs["delta"])
    # Feast runs the function's source alone: no module-level names inside it.
    names = ["amount_ratio", "big_spender", "delta_per_txn", "delta_mod_txn"]
    names += ["delta_per_txn_floor", "delta_mod_txn_floor"]
    out: dict[str, list[Any]] = {name: [] for name in names}
    for avg, count, amount, delta in rows:
        out["amount_ratio"].append(None if avg is None else amount / avg)
        out["big_spender"].append(amount > 100.0)
        # Python's // and % floor; CEL's / truncates and its % takes the dividend's sign.
        out["delta_per_txn"].append(None if count is None else delta // count)
        out["delta_mod_txn"].append(None if count is None else delta % count)
        out["delta_per_txn_floor"].append(None if count is None else delta // count)
        out["delta_mod_txn_floor"].append(None if count is None else delta % count)
    return out


txn_scoring = FeatureService(name="txn_scoring", features=[user_stats, txn_features])
