# lockstream — the two commands of the README are `make demo` and `make test`; every
# other target is a step of theirs or a developer's convenience.

GO          ?= go
BIN         := bin/lockstream
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Go from its tarball and Debian's daemons (clickhouse-server) live outside some PATHs.
export PATH := $(PATH):/usr/local/go/bin:/usr/sbin:/sbin

.PHONY: services build migrate test soak lint demo bench docs clean

## services: install (apt-get) and start PostgreSQL, Redis, ClickHouse, RabbitMQ, Mosquitto and kcat on 127.0.0.1
services:
	bash deploy/local/services.sh

## build: compile bin/lockstream
build:
	$(GO) build -o $(BIN) ./cmd/lockstream

## migrate: apply the embedded migrations to the configured stores
migrate: services build
	./$(BIN) migrate

# Tests that count requests against a wall-clock limit (Swrve's 300 starts in any
# second) run alone, after the others: how late a loaded machine runs goroutines
# moves what they measure. The chaos soak (90 s here) checks Swrve's rate too,
# and runs 19 processes of its own.
ALONE := ^(TestPushLoadThroughProcesses|TestSwrveRateSharedByRetriers|TestChaosSoak)$$

## test: start the services, then run every test with the race detector
test: services
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 18m -skip '$(ALONE)' ./...
	$(GO) test -race -count=1 -timeout 10m -run '$(ALONE)' ./cmd/lockstream/

## soak: the chaos soak for SOAK_DURATION (default 10m): the deploy/k8s topology as
## processes, killed, stopped and restarted at random, then every promise checked
SOAK_DURATION ?= 10m
soak: services
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -timeout 60m -run '^TestChaosSoak$$' -v ./cmd/lockstream/

## lint: gofmt, go vet and staticcheck
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## demo: start the services and run the whole pipeline locally, showing what happens
demo: services build
	bash deploy/local/demo.sh

## bench: the Go benchmarks of bench/ (figures go to bench/RESULTS.md by hand)
bench: services
	$(GO) test -run '^$$' -bench . -benchtime 5000x ./bench/

## docs: rewrite the settings tables of README.md and docs/DESIGN.md from the declarations
docs:
	$(GO) test -count=1 -run TestSettingsDocsMatch ./cmd/lockstream -update-docs

clean:
	rm -rf bin data
