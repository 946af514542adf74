# berth — build and test.
#
#   make test   installs what the tests need (Debian packages), then runs the
#               whole suite against the real components with -race.

GO        ?= go
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS  := openssh-server openssh-client procps busybox-static postgresql dash bash zsh
FUZZTIME  ?= 5s

.PHONY: test prereqs build vet fuzz bench

test: prereqs
	BERTH_REQUIRE_REAL=1 $(GO) test -race -timeout 30m ./...
	$(MAKE) --no-print-directory fuzz

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

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...

# fuzz runs every fuzz target briefly (seed corpus plus FUZZTIME of new inputs).
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . || true); do \
	  dir=$$(dirname $$f); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "fuzz $$dir $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$dir; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
