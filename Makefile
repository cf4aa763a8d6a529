# Herald: the two commands a fresh Debian machine needs are `make run` and `make test`.
SWIFT ?= swift
CONFIG ?= config.json
HERALD := .build/release/herald

.PHONY: all bootstrap build build-debug run test bench fuzz soak check clean

all: build

bootstrap:
	@scripts/bootstrap.sh

build: bootstrap
	$(SWIFT) build -c release --product herald

build-debug: bootstrap
	$(SWIFT) build

## run: bootstrap, build, and start Herald on config.json (see README).
run: build
	@scripts/run.sh $(CONFIG)

## test: bootstrap (with Synapse for the Matrix gateway test and Chromium for the demo page test), build, and run the whole test suite.
# The suites that load the whole machine (1,100 slow connections, 1,000 streams, the benchmarks' smoke runs, which
# wait on child processes from the test threads), need a node under strace to keep up (DatabaseOutageTests), count how
# many accepts share a commit (SQLiteDeliveryQueueTests), saw a first Matrix notify go unanswered under the full load
# (MatrixGatewayLimitsTests, not yet explained), push 30,000 notifications through three nodes (MultiNodeTests), tell a
# stalled reader from a gone one by timing (HTTPStreamTests) or wait on a test
# clock's sleepers run on their own after the rest, so that neither slows the other past its bounds.
ALONE := FrontDoorTests|HangUpWatcherTests|StreamHubAckTests|HeraldBenchTests|DatabaseOutageTests|MatrixGatewayLimitsTests|SQLiteDeliveryQueueTests|MultiNodeTests|HTTPStreamTests
# Suites that hold both ends of 5,000 connections at once (a reconnect storm) run each in a process of
# its own: together, or beside the suites above, they would pass the 20,000-descriptor limit.
STORM := StreamStormTests|HTTPAcceptorTests
test:
	@scripts/bootstrap.sh --with-synapse --with-chromium
	$(SWIFT) test --skip '$(ALONE)|$(STORM)'
	$(SWIFT) test --skip-build --filter '$(ALONE)'
	for suite in $(subst |, ,$(STORM)); do $(SWIFT) test --skip-build --filter "$$suite" || exit 1; done

## check: validate config.json and the credentials it names.
check: build
	@scripts/make-test-certs.sh var/certs
	@HERALD_API_KEY=$${HERALD_API_KEY:-$$(cat var/api-key 2>/dev/null || echo unset-key-0123456789)} \
	 HERALD_CLIENT_SECRET=$${HERALD_CLIENT_SECRET:-$$(cat var/client-secret 2>/dev/null || echo unset-client-secret-0123456789abcdef)} \
	 HMS_APP_SECRET=$${HMS_APP_SECRET:-$$(cat var/hms-app-secret 2>/dev/null || echo unset-hms-app-secret)} \
	 XIAOMI_APP_SECRET=$${XIAOMI_APP_SECRET:-$$(cat var/xiaomi-app-secret 2>/dev/null || echo unset-xiaomi-app-secret)} \
	 OPPO_MASTER_SECRET=$${OPPO_MASTER_SECRET:-$$(cat var/oppo-master-secret 2>/dev/null || echo unset-oppo-master-secret)} \
	 VIVO_APP_SECRET=$${VIVO_APP_SECRET:-$$(cat var/vivo-app-secret 2>/dev/null || echo unset-vivo-app-secret)} \
	 $(HERALD) check --config $(CONFIG)

## bench: benchmarks with reference tools measured in the same run (herald-bench, its own binary).
bench: build
	$(SWIFT) build -c release --product herald-bench
	@scripts/bench.sh

## fuzz: libFuzzer on the API's notification body readers (FUZZ_SECONDS, default 300).
fuzz: bootstrap
	@scripts/fuzz.sh

## soak: the daemon under load with APNs faults, GOAWAYs and a reload; exactly-once check, RSS per round.
soak: build
	@scripts/soak.sh

clean:
	rm -rf .build var
