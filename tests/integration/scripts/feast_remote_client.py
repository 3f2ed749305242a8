#!/usr/bin/env python3
"""Feast's own client, unchanged, against a feature server URL: a FeatureStore whose online
store is `type: remote` (Feast's REST client) over the registry REGISTRY of project `bench`,
asking for FEATURES (a service name, or view:feature references separated by commas) of the
users USER..., with full feature names when FULL is "true". Prints `to_dict()` as JSON.

usage: feast_remote_client.py URL REGISTRY FEATURES FULL USER...
"""

import json
import os
import sys
import tempfile

from feast import FeatureStore


def main():
    url, registry, features, full, *users = sys.argv[1:]
    with tempfile.TemporaryDirectory() as repo:
        with open(os.path.join(repo, "feature_store.yaml"), "w") as f:
            f.write(
                "project: bench\nprovider: local\n"
                f"registry: {registry}\n"
                f"online_store:\n  type: remote\n  path: {url}\n"
                "entity_key_serialization_version: 3\n"
            )
        store = FeatureStore(repo_path=repo)
        wanted = features.split(",") if ":" in features else store.get_feature_service(features)
        response = store.get_online_features(
            features=wanted,
            entity_rows=[{"user_id": u} for u in users],
            full_feature_names=full == "true",
        )
        print(json.dumps(response.to_dict(), sort_keys=True))


if __name__ == "__main__":
    main()
