# Pushes rows with Feast's own SDK (FeatureStore.push, to the online store), one push per batch
# in order: what Ferry's writes in Feast's layout are compared with.
# Usage: feast_push.py REPO PUSH_SOURCE JSON_BATCHES  (each batch: {"column": [values], ...},
# event times as RFC 3339 text in the column `event_timestamp`).
import json
import sys

import pandas as pd
from feast import FeatureStore
from feast.data_source import PushMode

repo, source, batches = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = FeatureStore(repo_path=repo)
for batch in batches:
    df = pd.DataFrame(batch)
    df["event_timestamp"] = pd.to_datetime(df["event_timestamp"], utc=True, format="ISO8601")
    store.push(source, df, to=PushMode.ONLINE)
print("pushed", len(batches))
