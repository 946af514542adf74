// Package tcbench measures berth's Docker lease against testcontainers-go
// and `docker run --rm IMAGE true` in one run (BenchmarkDockerLeaseVsTestcontainers).
// It is a module of its own, so that testcontainers-go is no dependency of
// berth: the main module's `./...` does not reach it, and its go.mod points
// at the berth tree beside it (replace ../..). Run it from this directory:
//
//	BERTH_REQUIRE_REAL=1 go test -run '^$' -bench . -benchtime 10x
package tcbench
