# Ferry's commands. See README.md.
.PHONY: demo demo-feast stop test lint build

demo:            ## install what is missing, build, start the stack, send sample requests
	bash scripts/demo.sh

demo-feast:      ## Ferry in front of a Feast repo (examples/feast): feast apply + materialize, the same request to Feast's server and to Ferry, side by side
	bash scripts/demo-feast.sh

stop:            ## stop exactly what `make demo` started
	bash scripts/stop.sh

test:            ## every test: unit + integration (real Envoy, Redis, reader, model)
	bash scripts/test.sh

lint:            ## docs links + rustfmt + clippy (also for wasm32-wasip1), warnings are errors
	bash scripts/lint.sh

build:
	cargo build --release -p ferry -p ferry-reader -p ferry-demo-model
	cargo build --release -p ferry-filter --target wasm32-wasip1
	cargo build --profile native -p ferry-native

.PHONY: bench
bench:           ## latency benchmarks vs Feast and the fleet figures, ~30 min, report in bench/.run/ (QUICK=1: smoke run; RECORD=1: write bench/README.md, bench/results/; FLEET=0: no fleet run); see bench/README.md
	QUICK=$(QUICK) RECORD=$(RECORD) FLEET=$(FLEET) bash bench/bench.sh

.PHONY: fuzz
fuzz:            ## coverage-guided fuzzing of the filter, FUZZ_SECONDS per target (default 60); see fuzz/README.md
	bash scripts/fuzz.sh

.PHONY: oci-image
oci-image:       ## the filter as an OCI image layout in target/oci/ferry-filter (Istio, Envoy Gateway)
	cargo build --release -p ferry-filter --target wasm32-wasip1
	cargo run --release -q -p ferry -- oci-image --wasm target/wasm32-wasip1/release/ferry_filter.wasm -o target/oci/ferry-filter

.PHONY: docker-demo docker-stop test-docker
docker-demo:     ## the demo as a compose stack in Docker, no registry needed; see docker/README.md
	bash scripts/docker-demo.sh

docker-stop:     ## remove the compose stack; stop the engine docker-demo started, restore the network
	bash scripts/docker-stop.sh

test-docker:     ## the compose stack up, enriched values and a hot push checked, all torn down
	bash scripts/docker-test.sh

.PHONY: test-gateway
test-gateway:    ## a real Envoy Gateway (v1.9.1, built from its Go module once, cached) reads deploy/envoy-gateway; Wasm and native enrich through it (root: runs in namespaces)
	bash scripts/test-gateway.sh
