# kcp-shard-operator. `make test` and `make demo` set up a fresh machine on their own.
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: bootstrap tools prepare images test lint typecheck pytest demo bench bench-scale api-requests fidelity crds dev \
	clean image test-image

bootstrap:
	@bash hack/bootstrap.sh

# The real parts (kube-apiserver, kube-controller-manager, etcd 3.6, kcp, kine) from their Go
# modules; `make test` builds them first, each binary once per pinned version.
tools:
	@bash hack/tools/build.sh

lint: bootstrap
	$(BIN)/ruff check operator testkit tests hack
	$(BIN)/ruff format --check operator testkit tests hack

typecheck: bootstrap
	$(BIN)/mypy

# Two workers (the machines have two cores; the end-to-end tests mostly wait on clusters). A test module
# stays on one worker: tests/node starts a cluster with a real node per module (its tests break it), the
# e2e tests share one per worker. PYTEST_WORKERS=0: serial.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest --durations=25 -n $(PYTEST_WORKERS) --dist loadfile
pytest: prepare
	$(PYTEST)

# mypy runs beside pytest (its half minute of one core overlaps the clusters' start); either failing fails.
test: lint prepare
	@echo "$(BIN)/mypy & $(PYTEST)"
	@$(BIN)/mypy & typecheck=$$!; $(PYTEST); tests=$$?; wait $$typecheck; checked=$$?; \
	  [ $$checked -eq 0 ] || echo "make test: mypy found errors (above)"; \
	  [ $$tests -eq 0 ] && [ $$checked -eq 0 ]

# On a real node (containerd, kubelet) with the operator in a container of `make image`; the stand-in kcp,
# or with REAL=1 real kcp (v0.30.0 -> v0.31.2) from `make tools`, put on the node as the README says;
# FLEET=1: a sharded kcp (root, two shards, kcp's cache server and front-proxy) upgraded from one apply.
demo: prepare
	FLEET=$(FLEET) REAL=$(REAL) $(BIN)/python hack/demo.py

bench: bootstrap tools
	$(BIN)/python hack/bench.py

# N shards (SHARDS="10 25 50") changed at once: wall time, the operator's CPU, memory and requests per
# roll, and the stack's processes' memory and CPU by kind.
bench-scale: bootstrap tools
	$(BIN)/python hack/bench_scale.py

# The operator's requests to the API server per round and per roll, and what its lists returned, from
# kube-apiserver's audit log (SHARDS="1 20", WINDOW=60; OPERATOR_SRC=<dir> runs another tree's operator).
api-requests: bootstrap tools
	$(BIN)/python hack/api_requests.py

# The stand-in kcp measured against real kcp, side by side (RUNS=3 by default).
fidelity: bootstrap tools
	$(BIN)/python hack/fidelity.py

# The product image from Dockerfile with no registry (buildah on a debootstrap base), as a docker-archive tar
# in the cache; its path is the last line. test-image: the same plus the test kit (the stand-in kcp).
image: bootstrap
	@bash hack/image.sh

test-image: bootstrap
	@bash hack/image.sh test

images: bootstrap
	@bash hack/image.sh && bash hack/image.sh test

# The Go parts and the images need nothing of each other: built side by side. On a cold machine the Go
# builds keep both cores busy for over 20 minutes, while the image's debootstrap and apt-get mostly wait on
# downloads and the disk.
prepare: bootstrap
	@$(MAKE) --no-print-directory -j2 tools images

crds: bootstrap
	$(BIN)/kcpshard crds

dev: bootstrap
	$(BIN)/kcpshard-dev up

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .dev
