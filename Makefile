# fairgate. `make help` lists the targets.
GO        ?= go
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
PKGS      := ./...

.PHONY: help build run test test-short bench bench-service fuzz vet staticcheck fmt-check tidy-check deps-check lint ci ensure-redis ensure-chromium ensure-gateways ensure-packaging image

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

build: ## build bin/fairgate (with its commit: fairgate version)
	$(GO) build -buildvcs=true -o bin/fairgate ./cmd/fairgate

IMAGE ?= fairgate:$(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

image: ## the container image (podman): the static binary built here, in an empty image (Containerfile)
	mkdir -p build
	CGO_ENABLED=0 $(GO) build -buildvcs=true -trimpath -o build/fairgate ./cmd/fairgate
	cp /etc/ssl/certs/ca-certificates.crt build/ca-certificates.crt
	podman build --build-arg VERSION=$(lastword $(subst :, ,$(IMAGE))) -t $(IMAGE) -f Containerfile .

run: ## run the service on the embedded memory store
	$(GO) run ./cmd/fairgate serve

ensure-redis: ## install redis-server for the tests if missing (apt-get, as root)
	@bash scripts/ensure-redis.sh

ensure-gateways: ## install nginx and Caddy for the gateway tests if missing (apt-get, as root)
	@bash scripts/ensure-gateways.sh

ensure-packaging: ## install podman and systemd-analyze for the packaging tests if missing (apt-get, as root)
	@bash scripts/ensure-packaging.sh


ensure-chromium: ## install Chromium for the dashboard's browser test if missing (apt-get, as root)
	@bash scripts/ensure-chromium.sh

test-short: ## the fast tier, under a minute: go test -short, no redis-server, nginx, Caddy, Chromium, podman or binary built (internal/testenv)
	$(GO) test -short -shuffle=on $(PKGS)

test: ensure-redis ensure-chromium ensure-gateways ensure-packaging ## the whole suite, race detector on, against real redis-server processes, nginx, Caddy and a headless Chromium
	CGO_ENABLED=0 $(GO) build -buildvcs=true -trimpath -o bin/test/fairgate ./cmd/fairgate  # the binary the tests run, built once (internal/testenv.BinaryEnv)
	FAIRGATE_TEST_BINARY=$(CURDIR)/bin/test/fairgate $(GO) test -p 6 -race -shuffle=on -ldflags='-s -w' -timeout 9m $(PKGS)  # -s -w: no DWARF to link into ~60 test binaries (race reports keep their lines); -p 6 on 2 cores: the longest packages mostly wait on real Redis servers and clocks (an idle instance's 30 s count, clusters failing over), and a test program waiting holds a build slot idle (cold: 606 s at -p 2, 613 s at -p 4, 524 s at -p 6)
	CGO_ENABLED=0 $(GO) test -trimpath -ldflags='-s -w' -count=1 -run 'TestResetsNeverOverAdmit' ./store/redisstore  # left out of -race (store/redisstore/reset_test.go); built as the tests' static fairgate binary is, to share its packages

bench-service: ensure-redis ## the real binaries under wrk, server CPU per request beside the floors and peers (bench/service_test.go)
	@bash scripts/ensure-wrk.sh
	cd bench && $(GO) test -run '^$$' -bench '^BenchmarkService$$' -benchtime 1x -timeout 30m .

bench: ensure-redis ## benchmarks of this module (peers: cd bench && go test -bench .)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

fuzz: ## run every fuzz target for FUZZTIME each (scripts/fuzz.sh: a coordinator stall after the last input is a pass)
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    GO=$(GO) bash scripts/fuzz.sh $$pkg $$f $(FUZZTIME); \
	  done; done

vet: ## go vet
	$(GO) vet $(PKGS)

staticcheck: ## staticcheck
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

fmt-check: ## fail if any file is not gofmt'ed
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt'ed:"; echo "$$out"; exit 1; fi

tidy-check: ## fail if go.mod or go.sum is not tidy
	$(GO) mod tidy -diff

deps-check: ## keep the dependency direction (algo <- store <- backends)
	@bash scripts/deps-check.sh

lint: vet fmt-check tidy-check deps-check staticcheck ## every static check

ci: lint test ## what CI runs, and more
