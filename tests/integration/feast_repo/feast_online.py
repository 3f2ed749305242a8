# Prints, as JSON, what Feast's own get_online_features answers for each service and entity
# list given on the command line: {"names": [...], "values": [[...]], "statuses": [[...]],
# "event_seconds": [[...]]}, one inner list per feature (0 seconds: no event time).
# Usage: feast_online.py REPO SERVICE JSON_ENTITY_ROWS [short]
# Entity rows may carry request data for on-demand feature views (extra keys). `short` asks for
# short feature names: Feast 0.67 drops a python-mode on-demand view's outputs when
# full_feature_names is true (its UDF's short output names are not found under full ones).
# The service's features are asked for by reference: asked for by service, Feast 0.67 reads a
# precompute_online service's precomputed vectors only, and fails the whole call when one
# entity has none (an unknown id); by reference it reads each view's own fields, as Ferry does.
import json
import sys

from feast import FeatureStore

repo, service, rows = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
full_names = sys.argv[4:] != ["short"]
store = FeatureStore(repo_path=repo)
fs = store.get_feature_service(service)
refs = [f"{p.name}:{f.name}" for p in fs.feature_view_projections for f in p.features]
resp = store.get_online_features(
    features=refs,
    entity_rows=rows,
    full_feature_names=full_names,
).proto
names = list(resp.metadata.feature_names.val)
out = {"names": names, "values": [], "statuses": [], "event_seconds": []}
for vec in resp.results:
    vals = []
    for v in vec.values:
        kind = v.WhichOneof("val")
        vals.append(None if kind in (None, "null_val") else getattr(v, kind))
    out["values"].append(vals)
    out["statuses"].append([int(s) for s in vec.statuses])
    out["event_seconds"].append([t.seconds for t in vec.event_timestamps])
print(json.dumps(out))
