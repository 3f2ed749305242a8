# Feast's get_online_features answer as the tests compare it (imported by feast_online.py and
# feast_layouts.py; defines nothing Feast reads).


def online_json(resp):
    """`resp` (a GetOnlineFeaturesResponse proto) as {"names", "values", "statuses",
    "event_seconds"}: one inner list per entity, nulls as None, 0 seconds for no event time."""
    out = {"names": list(resp.metadata.feature_names.val), "values": [], "statuses": [],
           "event_seconds": []}
    for vec in resp.results:
        vals = []
        for v in vec.values:
            kind = v.WhichOneof("val")
            vals.append(None if kind in (None, "null_val") else getattr(v, kind))
        out["values"].append(vals)
        out["statuses"].append([int(s) for s in vec.statuses])
        out["event_seconds"].append([t.seconds for t in vec.event_timestamps])
    return out
