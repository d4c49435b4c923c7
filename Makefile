# rollgate: the two commands are `make demo` and `make test`; the rest are parts of them.
SHELL := /bin/bash
NODES ?= 3

.PHONY: help build control-plane cluster-up cluster-down demo test lint fmt bench

help:
	@echo "make demo          run rollgate on a local control plane and narrate what it does"
	@echo "make test          lint, unit tests and e2e tests on a local control plane of their own"
	@echo "make cluster-up    start the local control plane (NODES=n simulated nodes)"
	@echo "make cluster-down  stop it"
	@echo "make bench         benchmarks (see README)"

build:
	cargo build --release --locked -p rollgate -p lb-emulator --bins

control-plane:
	bash hack/build-control-plane.sh

cluster-up:
	NODES=$(NODES) bash hack/cluster-up.sh

cluster-down:
	bash hack/cluster-down.sh

demo: build
	bash hack/demo.sh

test:
	bash hack/test.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	python3 hack/import-graph.py --with-tests src crates/alibaba-lb/src crates/lb-emulator/src

fmt:
	cargo fmt --all

bench: build
	bash hack/bench.sh
