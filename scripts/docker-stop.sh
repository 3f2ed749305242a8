#!/usr/bin/env bash
# `make docker-stop`: removes the compose stack `make docker-demo` started (containers, network,
# volumes; the images stay, for a fast next run), then stops the Docker engine if docker-demo
# started it, putting the host's network state back as it was (checked; see docker-lib.sh).
set -uo pipefail
source "$(dirname "$0")/docker-lib.sh"
export PROJECT=${FERRY_DOCKER_PROJECT:-ferry}
if engine_running && command -v docker-compose >/dev/null 2>&1; then
  say "removing the compose stack (project $PROJECT)"
  compose down -v --remove-orphans 2>&1 | grep -v '^$'
fi
engine_stop
