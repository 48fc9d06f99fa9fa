# result-inbox — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
WITH_MYSQL := scripts/with-mysql.sh

.PHONY: demo test bench build check fmt-check clippy doc unit integration toolchain fuzz

## demo: the whole local demo (orbit-dev, a throwaway database unless ORBIT_RECEIVER_DSN is set, init, demo)
demo: toolchain build
	scripts/demo.sh

## test: formatting, lints, docs, then every test (integration tests against a throwaway server)
test: check build
	$(WITH_MYSQL) $(CARGO) test --workspace --locked

## build: the binaries (receiver, orbit-dev); the end-to-end tests run them as processes
build:
	$(CARGO) build --workspace --bins --locked

## check: formatting, clippy with warnings as errors, documentation without warnings
check: toolchain fmt-check clippy doc

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --locked

## unit: the tests that need no database
unit:
	$(CARGO) test --workspace --lib --bins --locked

## integration: only the integration tests, against a throwaway server
integration: build
	$(WITH_MYSQL) $(CARGO) test --workspace --test '*' --locked

toolchain:
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install the Rust toolchain (https://rustup.rs)"; exit 2; }
	@$(CARGO) fmt --version >/dev/null 2>&1 || { echo "rustfmt missing: run 'rustup component add rustfmt'"; exit 2; }
	@$(CARGO) clippy --version >/dev/null 2>&1 || { echo "clippy missing: run 'rustup component add clippy'"; exit 2; }

## bench: criterion benchmarks of canonical hashing (+ ratio report), then apply throughput, end to end, and receiver verify over 1 000 000 rows against a throwaway server
bench: toolchain
	$(CARGO) bench --locked --bench canonical_hash
	-$(CARGO) run --locked --release --example bench_report
	$(WITH_MYSQL) $(CARGO) bench --locked --bench apply
	$(CARGO) build --locked --release --workspace --bins
	$(WITH_MYSQL) $(CARGO) bench --locked --bench end_to_end
	$(WITH_MYSQL) $(CARGO) bench --locked --bench verify

## fuzz: every fuzz target in fuzz/ for FUZZ_SECONDS each (default 60), on stable Rust (no sanitizer); installs cargo-fuzz if missing
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := canonicalize event
fuzz:
	@$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install --locked cargo-fuzz
	cd fuzz && for target in $(FUZZ_TARGETS); do \
		$(CARGO) fuzz run --sanitizer none --release $$target -- \
			-max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=20 || exit 1; \
	done
