#!/usr/bin/env python3
"""passthrough.py ENVOY_YAML PORT: prints the Envoy bootstrap rendered by `ferry envoy-config`
with a second listener on PORT that is the same listener (same connection manager, route,
buffer limit, model cluster) without the ferry filter: the floor of `make bench`, so that the
difference between the two listeners is the filter and its reader call, nothing else."""

import copy
import sys

import yaml


def main():
    path, port = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        config = yaml.safe_load(f)
    listeners = config["static_resources"]["listeners"]
    ferry = listeners[0]
    plain = copy.deepcopy(ferry)
    plain["name"] = "passthrough"
    plain["address"]["socket_address"]["port_value"] = port
    for chain in plain["filter_chains"]:
        for net_filter in chain["filters"]:
            hcm = net_filter.get("typed_config", {})
            if "http_filters" in hcm:
                hcm["stat_prefix"] = "passthrough"
                before = len(hcm["http_filters"])
                hcm["http_filters"] = [h for h in hcm["http_filters"] if h.get("name") != "ferry"]
                if len(hcm["http_filters"]) != before - 1:
                    sys.exit("passthrough.py: no http filter named 'ferry' in the listener")
    listeners.append(plain)
    yaml.safe_dump(config, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
