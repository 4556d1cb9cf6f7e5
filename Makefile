# kdelay — common tasks. CI runs .ci/run, which runs `go test -race -count=1 ./...`
# (the README's test command) and the real-broker tier.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
FUZZTIME ?= 60s
IMAGE   ?= kdelay:$(VERSION)

.PHONY: build test integ bench fuzz lint ci helm image test-containers

build: ## the static binary, as the Dockerfile builds it
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags "$(LDFLAGS)" -o bin/kdelay ./cmd/kdelay

test: ## the default test run: unit and kfake tiers
	$(GO) test -race -count=1 ./...

integ: ## the end-to-end suite against a real Apache Kafka started from Maven jars
	addr=$$(bash .ci/kafka.sh start) && \
	KDELAY_TEST_BROKERS=$$addr KDELAY_KAFKA_CTL=$(CURDIR)/.ci/kafka.sh $(GO) test -race -count=1 -v ./integration/... ; \
	rc=$$?; bash .ci/kafka.sh stop; exit $$rc

bench: ## micro-benchmarks (see docs/benchmarks.md for the end-to-end bench)
	$(GO) test -run '^$$' -bench . -benchmem ./levels/ ./wheel/ ./relay/

fuzz: ## every fuzz target for FUZZTIME each
	$(GO) test -run '^$$' -fuzz '^FuzzParseHeaders$$' -fuzztime $(FUZZTIME) ./levels/
	$(GO) test -run '^$$' -fuzz '^FuzzParseLevels$$' -fuzztime $(FUZZTIME) ./levels/
	$(GO) test -run '^$$' -fuzz '^FuzzRecover$$' -fuzztime $(FUZZTIME) ./wheel/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./offsetmap/
	$(GO) test -run '^$$' -fuzz '^FuzzRoundTrip$$' -fuzztime $(FUZZTIME) ./offsetmap/

lint: ## vet, formatting and staticcheck
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	bash .ci/staticcheck.sh

helm: ## lint, render and check the Helm chart
	bash charts/check.sh

.PHONY: release-snapshot
release-snapshot: ## goreleaser check and a snapshot release into dist/, as CI runs them
	bash .ci/release.sh

image: ## the container image IMAGE: docker build, or without Docker podman and no registry (.ci/image.sh)
	bash .ci/image.sh build "$(IMAGE)" "$(VERSION)"

test-containers: ## the container tier: the image's smoke test and the testcontainers module on podman
	bash .ci/containers.sh

ci: ## what CI runs
	bash .ci/run
