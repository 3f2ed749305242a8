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
from online_json import online_json

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
print(json.dumps(online_json(resp)))
