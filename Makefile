# result-inbox — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
WITH_MYSQL := scripts/with-mysql.sh
WITH_GALERA := scripts/with-galera.sh
WITH_POSTGRES := scripts/with-postgres.sh
WITH_RABBITMQ := scripts/with-rabbitmq.sh
# The `receiver` binary needs the `cli` feature; a library user's default
# features leave it (and its dependencies) out. `testing` is the library's
# helpers for testing an inner service (an example and its test use them).
CLI := --features result-inbox/cli,result-inbox/testing
# The same for the whole workspace: orbit-dev's bridges to NATS and
# RabbitMQ as well (`make demo` builds orbit-dev without them).
ALL := $(CLI),orbit-dev/nats,orbit-dev/rabbitmq
# What `make demo` runs: the receiver for MySQL and Orbit (`cli-core`),
# with PostgreSQL where ORBIT_RECEIVER_DSN names a PostgreSQL server.
comma := ,
DEMO_FEATURES := result-inbox/cli-core$(if $(filter postgres://% postgresql://%,$(ORBIT_RECEIVER_DSN)),$(comma)result-inbox/postgres)

.PHONY: demo test bench build check fmt-check clippy doc deps-check package-check unit integration cluster-test toolchain fuzz nats-server rabbitmq-server nextest doctest standardwebhooks promtool systemd-analyze

## demo: the whole local demo (orbit-dev, a throwaway database unless ORBIT_RECEIVER_DSN is set, init, demo)
# It builds only what it runs: the two binaries, the receiver without the
# sources, engine and traces' exporter the demo does not use, orbit-dev
# without its bridges, and the crate's own code without the incremental
# cache (a first build gains nothing from writing one).
demo: toolchain
	CARGO_INCREMENTAL=0 $(CARGO) build --locked -p result-inbox -p orbit-dev --bins --features $(DEMO_FEATURES)
	scripts/demo.sh

# Every test binary runs under cargo-nextest (.config/nextest.toml): each
# test a process of its own, many at once, so that tests waiting on leases,
# outages and timeouts overlap. Both passes select the same packages and
# features, so the second builds nothing.
NEXTEST := $(CARGO) nextest run --workspace --locked $(ALL)
# The crash-window and cluster tests, and RabbitMQ's killed consumer, once
# more, with the receiver in batching mode (tests/common builds its layer
# from RECEIVER_BATCH_MAX, as receiver consume does, and the receiver
# processes inherit it). Not RabbitMQ's restarted server: its two nodes
# of their own boot for 7 s of CPU each, beside the outage tests that
# count leases.
BATCHING_TESTS := binary(crash) | test(/^(commit_loss|db_outage|cluster|cluster_node_loss)::/) | test(/^rabbitmq::on_(mysql|postgres)::a_consumer_killed/)

## test: formatting, lints, docs, then every test (against a throwaway MariaDB server, a throwaway PostgreSQL server, a throwaway three-node Galera cluster, throwaway nats-servers and throwaway RabbitMQ nodes): the doctests, the batching-mode pass, then every test binary (with promtool and systemd-analyze on deploy/'s rules, dashboard and unit); the last lines are the count of passed and failed tests
# One server and one cluster for both passes; the cluster starts while the
# tests compile.
test: check nats-server rabbitmq-server standardwebhooks promtool systemd-analyze nextest doctest
	$(WITH_RABBITMQ) $(WITH_POSTGRES) $(WITH_MYSQL) $(WITH_GALERA) bash -c "RECEIVER_BATCH_MAX=16 $(NEXTEST) -E '$(BATCHING_TESTS)' && $(NEXTEST)"

## doctest: the examples in the documentation (cargo-nextest does not run them)
doctest:
	$(CARGO) test --doc --workspace --locked $(ALL)

## build: the binaries (receiver, orbit-dev); the end-to-end tests run them as processes
build:
	$(CARGO) build --workspace --bins --locked $(ALL)

## check: formatting, clippy with warnings as errors, documentation without warnings, a lean default dependency tree, a package that builds on its own
check: toolchain fmt-check clippy doc deps-check package-check

fmt-check:
	$(CARGO) fmt --all -- --check
	@# cargo fmt does not reach a module declared inside a macro (the
	@# feature! blocks of src/lib.rs), so every file is checked as well.
	rustfmt --edition 2021 --check $$(find src bin orbit-dev tests benches examples -name '*.rs')

clippy:
	$(CARGO) clippy --workspace --all-targets --locked $(ALL) -- -D warnings
	$(CARGO) clippy -p result-inbox --lib --locked -- -D warnings
	$(CARGO) clippy -p result-inbox --lib --locked --no-default-features -- -D warnings
	@# The binaries as `make demo` builds them.
	$(CARGO) clippy -p result-inbox -p orbit-dev --bins --locked --features result-inbox/cli-core -- -D warnings

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --locked $(ALL)

## deps-check: a library user's default features compile none of the command line's crates (no exporter, no OpenTelemetry SDK, no PostgreSQL driver), and `make demo` none of what it does not run
CLI_ONLY_CRATES := clap tracing-subscriber metrics-exporter-prometheus indicatif flate2 opentelemetry opentelemetry_sdk opentelemetry-otlp tracing-opentelemetry sqlx-postgres
# What the demo does not run (another engine, the brokers, traces) and the
# regex engine NATS's client brings.
DEMO_LEFT_OUT := sqlx-postgres async-nats amqprs opentelemetry_sdk regex-automata
# Fails when the tree of `cargo tree $(1)` holds one of the crates $(2),
# naming it and why ($(3)); otherwise says which tree ($(4)) holds none.
define none_in_tree
	@tree=$$($(CARGO) tree $(1) --locked --prefix none --format '{p}' | cut -d' ' -f1 | sort -u); \
	for crate in $(2); do \
		if echo "$$tree" | grep -qx "$$crate"; then \
			echo "deps-check: $$crate $(3)"; exit 1; \
		fi; \
	done; \
	echo "deps-check: $(4) none of: $(2)"
endef
deps-check:
	$(call none_in_tree,-e normal -p result-inbox,$(CLI_ONLY_CRATES),is in the default dependency tree of result-inbox; it belongs to the cli feature,default features compile)
	$(call none_in_tree,-e normal$(comma)build -p result-inbox -p orbit-dev --features result-inbox/cli-core,$(DEMO_LEFT_OUT),is in what make demo builds; the demo does not run it,make demo builds)

## package-check: the published package holds what a user needs and not the repository's test apparatus, and it compiles on its own, outside the workspace, with the binary (cargo check of the unpacked .crate; it shares the target directory, so only what differs is checked again)
PACKAGE_NEEDS := Cargo.toml README.md LICENSE-APACHE LICENSE-MIT schema.sql retention.sql schema.postgres.sql retention.postgres.sql outbox.sql outbox.postgres.sql src/lib.rs bin/receiver/main.rs examples/own_table.rs examples/own_table_postgres.rs examples/testing_inner_service.rs examples/testing_inner_service_postgres.rs
PACKAGE_KEEPS_OUT := tests/ benches/ fuzz/ scripts/ .ci/ .config/ Makefile
PACKAGED := target/package/result-inbox-$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
package-check:
	@list=$$($(CARGO) package --locked --allow-dirty -p result-inbox --list 2>/dev/null) || { $(CARGO) package --locked --allow-dirty -p result-inbox --list; exit 1; }; \
	for file in $(PACKAGE_NEEDS); do \
		echo "$$list" | grep -qx "$$file" || { echo "package-check: the package lacks $$file"; exit 1; }; \
	done; \
	for prefix in $(PACKAGE_KEEPS_OUT); do \
		if echo "$$list" | grep -q "^$$prefix"; then echo "package-check: the package holds $$prefix (not for users)"; exit 1; fi; \
	done
	@out=$$($(CARGO) package --locked --allow-dirty -p result-inbox --no-verify 2>&1) || { echo "$$out"; exit 1; }; \
	echo "$$out" | grep -E '^ *Packaged'; \
	rm -rf $(PACKAGED) && tar -xzf $(PACKAGED).crate -C target/package
	@out=$$(CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) check --locked --manifest-path $(PACKAGED)/Cargo.toml --lib --bins --features cli 2>&1) || { echo "$$out"; echo "package-check: the packaged crate does not compile on its own"; exit 1; }; \
	echo "$$out" | grep -E '^ *Finished'

## unit: the tests that need no database
unit: nextest
	$(CARGO) nextest run --workspace --lib --bins --locked $(ALL)

## integration: only the integration tests, against a throwaway server
integration: nats-server rabbitmq-server standardwebhooks promtool systemd-analyze nextest
	$(WITH_RABBITMQ) $(WITH_POSTGRES) $(WITH_MYSQL) $(WITH_GALERA) $(NEXTEST) -E 'kind(test)'

## cluster-test: only the tests on a throwaway three-node MariaDB Galera cluster (the cluster binary)
cluster-test: nextest
	$(WITH_GALERA) $(NEXTEST) -E 'binary(cluster)'

## nextest: cargo-nextest, which runs the test binaries (installed with cargo when missing)
nextest:
	@$(CARGO) nextest --version >/dev/null 2>&1 || { echo "cargo-nextest not found: installing it (cargo install --locked cargo-nextest)"; $(CARGO) install --locked cargo-nextest; }

## nats-server: the NATS server the JetStream tests start (installs Debian's package when missing)
nats-server:
	@scripts/need-nats.sh

## rabbitmq-server: Debian's RabbitMQ, whose throwaway nodes the RabbitMQ tests start (installs the package when missing, without starting its service)
rabbitmq-server:
	@scripts/need-rabbitmq.sh

## promtool: Prometheus's rule checker, with which the tests check and unit-test deploy/prometheus/'s rules and the dashboard's queries (installs Debian's prometheus when missing, without starting its server)
promtool:
	@scripts/need-promtool.sh

## systemd-analyze: systemd's unit checker, with which the tests verify deploy/systemd/'s unit (installs Debian's systemd when missing, without systemd-sysv, so it does not become the init; where it cannot, that one check is skipped)
systemd-analyze:
	@scripts/need-systemd-analyze.sh

## standardwebhooks: the Python package of Standard Webhooks that tests/webhook_endpoint.py verifies the relay's signatures with (installed with pip when missing)
standardwebhooks:
	@python3 -c 'import standardwebhooks' 2>/dev/null || python3 -m pip install --quiet standardwebhooks || { echo "standardwebhooks: the relay's tests verify signatures with the Python package standardwebhooks, which is missing and could not be installed (python3 -m pip install standardwebhooks)"; exit 2; }

toolchain:
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install the Rust toolchain (https://rustup.rs)"; exit 2; }
	@$(CARGO) fmt --version >/dev/null 2>&1 || { echo "rustfmt missing: run 'rustup component add rustfmt'"; exit 2; }
	@$(CARGO) clippy --version >/dev/null 2>&1 || { echo "clippy missing: run 'rustup component add clippy'"; exit 2; }

## bench: criterion benchmarks of canonical hashing (+ ratio report), then apply throughput (MySQL, then PostgreSQL), end to end (Orbit and NATS; Orbit on PostgreSQL beside it), the cost of exporting every delivery's trace (Orbit end to end with an OTLP receiver, without an endpoint, with a collector that is down), receiver verify over 1 000 000 rows against a throwaway server, apply on one Galera node vs three, and receiver prune of a 1 000 000-row inbox beside a consumer at full rate (one server, then the cluster)
bench: toolchain nats-server rabbitmq-server
	$(CARGO) bench --locked --bench canonical_hash
	-$(CARGO) run --locked --release --example bench_report
	$(WITH_MYSQL) $(CARGO) bench --locked --bench apply
	$(WITH_POSTGRES) $(CARGO) bench --locked --bench apply_postgres --features postgres
	$(CARGO) build --locked --release --workspace --bins $(ALL)
	$(WITH_RABBITMQ) $(WITH_POSTGRES) $(WITH_MYSQL) $(CARGO) bench --locked --bench end_to_end $(CLI)
	$(WITH_MYSQL) $(CARGO) bench --locked --bench tracing $(CLI)
	$(WITH_MYSQL) $(CARGO) bench --locked --bench verify
	$(WITH_GALERA) $(CARGO) bench --locked --bench cluster
	$(WITH_MYSQL) $(CARGO) bench --locked --bench prune
	$(WITH_GALERA) $(CARGO) bench --locked --bench prune
	$(WITH_POSTGRES) $(WITH_MYSQL) $(CARGO) bench --locked --bench outbox $(CLI)

## fuzz: every fuzz target in fuzz/ for FUZZ_SECONDS each (default 60), on stable Rust (no sanitizer); installs cargo-fuzz if missing
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := canonicalize event delivery_message
fuzz:
	@$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install --locked cargo-fuzz
	cd fuzz && for target in $(FUZZ_TARGETS); do \
		$(CARGO) fuzz run --sanitizer none --release $$target -- \
			-max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=20 || exit 1; \
	done
