# berth — build and test.
#
#   make test       installs what the tests need (Debian packages), builds
#                   with the machine's own Go (GOTOOLCHAIN=local), runs
#                   staticcheck and govulncheck, then the whole suite against
#                   the real components with -race; prints the public API's
#                   counts and the ten slowest tests.
#   make lint       staticcheck at a pinned version.
#   make vulncheck  govulncheck on a vulnerability database built locally from
#                   the golang.org/x/vulndb module (no network but the Go
#                   module proxy); see govulncheck.allow.

GO        ?= go
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS  := protobuf-compiler openssh-server openssh-client procps busybox-static postgresql dash bash zsh dropbear-bin chromium-headless-shell tmux libjs-xterm node-xterm runsc \
             etcd-server containerd runc containernetworking-plugins conntrack iptables iproute2
FUZZTIME  ?= 5s
TEST_ACCOUNT := berthtest

# The Go toolchain berth is built, checked and tested with. Every go command
# below runs with it (exported); the first one fetches it through the Go
# module proxy when it is not in the module cache yet. go.mod keeps `go 1.26`
# so adopters on Go 1.26 still compile: build-local checks that with the
# machine's own Go.
export GOTOOLCHAIN := go1.27.3
GOVERSION := $(shell GOTOOLCHAIN=$(GOTOOLCHAIN) $(GO) env GOVERSION)
ifeq ($(GOVERSION),)
$(error cannot run $(GO) with GOTOOLCHAIN=$(GOTOOLCHAIN): see go's message above)
endif

# Pinned tools, installed from the Go module proxy into TOOLS once per version
# and Go toolchain and kept there (a run with everything cached installs
# nothing; a tool built by one Go version is rebuilt for another, since it
# type-checks with its own go/types and standard library).
TOOLS               ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/berth-tools
STATICCHECK_VERSION := v0.8.2
GOVULNCHECK_VERSION := v1.9.0
VULNDB_VERSION      := v0.0.0-20261105234957-e22db6528018
# The Go generators of the plugin protocol (drivers/plugin/internal/pluginpb:
# make proto; its test checks that regenerating changes nothing and pins the
# same versions).
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# staticcheck runs with the machine's own Go (LOCALGOVERSION): it loads
# export data through `go list -export`, which then reuses every compile of
# build-local instead of compiling the module and its dependencies a second
# time with GOTOOLCHAIN (about a fifth of a cold make test's CPU).
LOCALGOVERSION      := $(shell GOTOOLCHAIN=local $(GO) env GOVERSION)
STATICCHECK         := $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)-$(LOCALGOVERSION)/staticcheck
GOVULNCHECK         := $(TOOLS)/govulncheck-$(GOVULNCHECK_VERSION)-$(GOVERSION)/govulncheck
INDEXDB             := $(TOOLS)/indexdb-$(VULNDB_VERSION)-$(GOVERSION)/indexdb
VULNDB              := $(TOOLS)/vulndb-$(VULNDB_VERSION)
PROTOC_GEN_GO       := $(TOOLS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)-$(GOVERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC  := $(TOOLS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)-$(GOVERSION)/protoc-gen-go-grpc
# The binaries of the tests' real single-node Kubernetes cluster
# (internal/testenv/kubecluster, issue 57): kube-apiserver,
# kube-controller-manager, kube-scheduler and kubelet, built from the Go
# module proxy by internal/cmd/kubebinaries (a scratch module next to them,
# KUBERNETES_BIN.src): make kubernetes, which make test runs. About 600 MB
# of modules and a 4.7 GB build cache; nothing once built. kubectl, the
# anchor of the driver's benchmark (which the suite does not run), is
# built beside them by make kubectl.
KUBERNETES_VERSION  := v1.37.2
KUBERNETES_BIN      := $(TOOLS)/kubernetes-$(KUBERNETES_VERSION)-$(GOVERSION)
# The tests find the binaries under BERTH_TOOLS (default: the same default
# as TOOLS), so that TOOLS= moves them for the tests too.
export BERTH_TOOLS  := $(TOOLS)

.PHONY: test prereqs build build-local vet lint vulncheck fuzz bench proto protogen kubernetes kubectl

# The suite runs through internal/cmd/testreport (go test -json): it prints
# each package's line, the whole output of every failed test, the public
# API's counts (internal/apicheck's TestAPICounts), and at the end the ten
# slowest tests and packages. The whole event stream is kept in
# $(TOOLS)/last-test-events.json (go test -json), for a closer look at where
# a run's time went.
#
# -race turns on checkptr, the compiler's check of every unsafe.Pointer
# conversion, in every package. modernc.org's SQLite is C translated to Go,
# one unsafe conversion per pointer step, and under checkptr SQLite's parser
# alone took most of the SQLite tests' time (4x slower: every test opens and
# migrates a store). TEST_GCFLAGS turns checkptr off in modernc.org's
# packages only; berth's own code keeps it, and the race detector stays on
# everywhere.
TEST_GCFLAGS ?= modernc.org/...=-d=checkptr=0
#
# -ldflags=-w links the test binaries without DWARF (about a third less
# linker CPU each, over some seventy binaries); stack traces and the race
# detector's reports come from the symbol and line tables, which stay.
TEST_LDFLAGS ?= -w
#
# TEST_P is go test's -p: how many of its actions (compiling a package,
# linking a test binary, running one) go at once. Its default, the number of
# cores, suits compiling; but a running test binary holds its slot while it
# waits on a container, sshd or PostgreSQL, and with two slots two such
# binaries (the root package's and the Docker driver's, a minute or two
# each) left the cores idle with the rest of the module still to compile.
# Six at once, with the slowest packages named first, took 918 s against
# 718 s with four (2026-12-07, both beside other work): the containers,
# browsers and databases those binaries drive compete for the same two
# cores, whatever go test's own share of them says.
TEST_P ?= 4
#
# TEST_GORACE is the race detector's options of every race-built process of
# the suite: the test binaries and what they start (the plugins, one per
# conformance subtest, the runner simulator, the test binaries re-run as
# envctl or a helper). By default the race runtime sleeps a second when a
# process exits (atexit_sleep_ms=1000, so that other threads can still
# report a race), and a plugin ended at each subtest's end held the subtest
# that second (drivers/plugin's fake pass: a third of its time). A race is
# still reported when it happens and still fails the process (exit status
# 66); only one that would start in the second after main returned goes
# unseen. The GORACE of make's environment comes first.
TEST_GORACE ?= $(strip $(GORACE) atexit_sleep_ms=0)

# Each of its four steps prints how long it took ("make test: ... took
# Ns"), so a slow machine's run says where its time went.
test:
	@s=$$(date +%s); $(MAKE) --no-print-directory prereqs || exit $$?; \
	  echo "make test: the Debian packages took $$(( $$(date +%s) - s ))s"
	@s=$$(date +%s); $(MAKE) --no-print-directory build-local lint vulncheck protogen kubernetes || exit $$?; \
	  echo "make test: the build with the machine's Go, staticcheck and govulncheck took $$(( $$(date +%s) - s ))s"
	@s=$$(date +%s); echo "GORACE='$(TEST_GORACE)' BERTH_REQUIRE_REAL=1 $(GO) run ./internal/cmd/testreport -slowest 10 -show '^TestAPICounts$$' -events $(TOOLS)/last-test-events.json -- -p $(TEST_P) -race -gcflags '$(TEST_GCFLAGS)' -ldflags '$(TEST_LDFLAGS)' -timeout 30m ./..."; \
	  GORACE='$(TEST_GORACE)' BERTH_REQUIRE_REAL=1 $(GO) run ./internal/cmd/testreport -slowest 10 -show '^TestAPICounts$$' -events $(TOOLS)/last-test-events.json -- -p $(TEST_P) -race -gcflags '$(TEST_GCFLAGS)' -ldflags '$(TEST_LDFLAGS)' -timeout 30m ./...; rc=$$?; \
	  echo "make test: the suite took $$(( $$(date +%s) - s ))s"; exit $$rc
	@s=$$(date +%s); $(MAKE) --no-print-directory fuzz || exit $$?; \
	  echo "make test: the fuzz targets took $$(( $$(date +%s) - s ))s"

# prereqs installs the Debian packages the tests use, only when missing.
prereqs:
	@missing=""; \
	for p in $(APT_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@# The unprivileged account that tests about what a sandboxed task can
	@# reach run the runner and its tasks as (internal/testenv.UnprivilegedName):
	@# a login shell and an unlocked password field ("*"), which sshd with
	@# UsePAM no needs.
	@if ! id -u $(TEST_ACCOUNT) >/dev/null 2>&1; then \
	  echo "creating the test account $(TEST_ACCOUNT)"; \
	  $(SUDO) useradd --system --create-home --shell /bin/sh $(TEST_ACCOUNT); \
	fi; \
	if [ "$$($(SUDO) getent shadow $(TEST_ACCOUNT) | cut -d: -f2)" != "*" ]; then \
	  $(SUDO) usermod -p '*' $(TEST_ACCOUNT); \
	fi
	@# gVisor's runsc as a runtime of this machine's Docker engine, for the
	@# runsc pass (issue 56): merged into /etc/docker/daemon.json, every other
	@# key kept, and dockerd told with SIGHUP (it reloads its runtimes live;
	@# the engine the other tests use is never restarted). Nothing when it is
	@# already registered (internal/cmd/dockerruntime).
	@mkdir -p $(TOOLS) && $(GO) build -o $(TOOLS)/dockerruntime ./internal/cmd/dockerruntime && \
	  $(SUDO) $(TOOLS)/dockerruntime

build:
	$(GO) build ./...

# build-local compiles with the machine's own Go instead of GOTOOLCHAIN: the
# language and standard library go.mod promises adopters (`go 1.26`).
#
# It compiles every package (go list -export: the compiler's export data,
# which staticcheck then reuses) and links nothing: linking the module's
# twenty-odd commands, which go build ./... discards and never caches, took
# a minute of every make test, and the check is the language and the
# standard library, which the compiler checks.
build-local:
	GOTOOLCHAIN=local $(GO) version
	GOTOOLCHAIN=local $(GO) list -export ./... >/dev/null

vet:
	$(GO) vet ./...

lint: $(STATICCHECK)
	GOTOOLCHAIN=local $(STATICCHECK) ./...

# vulncheck fails on a reachable vulnerability in a dependency unless
# govulncheck.allow names it (printed with its reason on every run);
# standard-library findings are printed, not failed on (see docs/security.md).
vulncheck: $(GOVULNCHECK) $(VULNDB)/index/db.json
	$(GO) run ./internal/cmd/vulngate -govulncheck $(GOVULNCHECK) -db $(VULNDB) -allow govulncheck.allow ./...

$(STATICCHECK):
	GOTOOLCHAIN=local GOBIN=$(@D) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# protogen installs the pinned generators (the test of pluginpb finds them
# there); proto regenerates the plugin protocol's Go code with them.
protogen: $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)

proto: protogen
	cd drivers/plugin/internal/pluginpb && protoc --plugin=protoc-gen-go=$(PROTOC_GEN_GO) \
	  --plugin=protoc-gen-go-grpc=$(PROTOC_GEN_GO_GRPC) --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative driver.proto

$(PROTOC_GEN_GO):
	GOBIN=$(@D) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(@D) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

# kubernetes builds the cluster's binaries once per release and Go version.
kubernetes: $(KUBERNETES_BIN)/kubelet

$(KUBERNETES_BIN)/kubelet:
	$(GO) run ./internal/cmd/kubebinaries -version $(KUBERNETES_VERSION) -out $(KUBERNETES_BIN)

kubectl: $(KUBERNETES_BIN)/kubectl

$(KUBERNETES_BIN)/kubectl:
	$(GO) run ./internal/cmd/kubebinaries -version $(KUBERNETES_VERSION) -out $(KUBERNETES_BIN) -kubectl

$(GOVULNCHECK):
	GOBIN=$(@D) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(INDEXDB):
	GOBIN=$(@D) $(GO) install golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION)

# The database is built from the OSV reports the vulndb module ships under
# data/osv (the module is in the module cache once indexdb is installed).
# The database does not depend on the toolchain, so indexdb is installed only
# when the database is built (a new toolchain does not rebuild either).
$(VULNDB)/index/db.json:
	@$(MAKE) --no-print-directory $(INDEXDB)
	@set -e; \
	src=$$(cd $(TOOLS) && $(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	test -d "$$src/data/osv" || { echo "golang.org/x/vulndb@$(VULNDB_VERSION) has no data/osv"; exit 1; }; \
	rm -rf $(VULNDB).tmp; \
	echo "building the vulnerability database from golang.org/x/vulndb@$(VULNDB_VERSION)"; \
	$(INDEXDB) -vulns "$$src/data/osv" -out $(VULNDB).tmp; \
	rm -rf $(VULNDB); mv $(VULNDB).tmp $(VULNDB)

# fuzz runs every fuzz target briefly (seed corpus plus FUZZTIME of new inputs).
# Each package's fuzzing test binary (coverage-instrumented) is built once
# (go test -c -fuzz, two packages at a time), then the targets run two at a
# time, one fuzzing worker each (-test.parallel 1: the same two cores as one
# target with two workers, in half the wall time), each in its package's
# directory with the corpus cache go test -fuzz uses
# ($GOCACHE/fuzz/PACKAGE). A run that the fuzzing engine itself aborts (its
# coordinator timing out a worker on a loaded machine: "context deadline
# exceeded" with no failing input written) is run once more; a failing input
# always fails. Each target's output is printed whole when it ends.
fuzz:
	@set -e; bins=$$(mktemp -d); trap 'rm -rf $$bins' EXIT; \
	fuzzcache=$$($(GO) env GOCACHE)/fuzz; \
	dirs=$$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); \
	printf '%s\n' $$dirs | xargs -P 2 -I{} sh -c 'pkg=$$($(GO) list "$$1"); $(GO) test -c -fuzz . -o "$$2/$$(echo $$pkg | tr / _).test" "$$1"' _ {} $$bins; \
	for dir in $$dirs; do \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$dir/*_test.go); do echo "$$dir $$t"; done; \
	done | xargs -P 2 -L 1 sh -c '\
	  dir=$$3; t=$$4; pkg=$$($(GO) list "$$dir"); bin=$$1/$$(echo $$pkg | tr / _).test; log=$$(mktemp); \
	  run() { (cd "$$dir" && "$$bin" -test.run "^$$" -test.fuzz "^$$t$$" -test.fuzztime $(FUZZTIME) -test.parallel 1 \
	    -test.fuzzcachedir "$$2/$$pkg" -test.paniconexit0 -test.timeout 10m) >>"$$log" 2>&1; }; \
	  echo "fuzz $$dir $$t" >"$$log"; \
	  if ! run; then \
	    if grep -q "context deadline exceeded" "$$log" && ! grep -q "Failing input written" "$$log"; then \
	      echo "fuzz $$dir $$t: the fuzzing engine timed out a worker; running it once more" >>"$$log"; \
	      if ! run; then cat "$$log"; rm -f "$$log"; exit 255; fi; \
	    else cat "$$log"; rm -f "$$log"; exit 255; fi; \
	  fi; \
	  cat "$$log"; rm -f "$$log"' _ $$bins $$fuzzcache

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
