# Feast's side of tests/integration/tests/feast_layouts.rs, on the repo in the current folder.
#   online SERVICE JSON_ENTITY_ROWS: get_online_features asked by FeatureService (so Feast reads
#     a precompute_online service's precomputed vectors), full names; prints JSON {"names",
#     "values", "statuses", "event_seconds"} (one inner list per column), or {"error": TEXT}
#     when Feast refuses the call.
#   state VIEW STATE: sets a feature view's lifecycle state (e.g. MATERIALIZING).
#   disable VIEW: disables a feature view.
import json
import sys

from feast import FeatureStore
from feast.feature_view import FeatureViewState
from online_json import online_json

store = FeatureStore(repo_path=".")
command = sys.argv[1]
if command == "online":
    service, rows = sys.argv[2], json.loads(sys.argv[3])
    try:
        resp = store.get_online_features(
            features=store.get_feature_service(service),
            entity_rows=rows,
            full_feature_names=True,
        ).proto
    except Exception as e:  # Feast's refusal is what the test compares
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(0)
    print(json.dumps(online_json(resp)))
elif command == "state":
    store.set_feature_view_state(sys.argv[2], FeatureViewState[sys.argv[3]])
elif command == "disable":
    store.disable_feature_view(sys.argv[2])
else:
    sys.exit(f"unknown command {command}")
