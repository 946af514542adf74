package berth_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// heavy are module path prefixes a program using berth with only the SSH
// driver must not link: the Docker engine client, OpenTelemetry (which
// the Docker client pulls in) and Kubernetes' client-go (the Kubernetes
// driver's). go-containerregistry's authn and docker/cli's
// config package (with docker-credential-helpers, which it uses) are
// allowed: they live under other module paths. Each entry is a module path
// followed by "/", matching the module's packages and not a sibling module
// whose name merely starts the same way.
var heavy = []string{"github.com/docker/docker/", "go.opentelemetry.io/", "k8s.io/"}

// goList runs go list with args and returns its output.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH: %v", err)
	}
	out, err := exec.Command(goTool, append([]string{"list"}, args...)...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, msg)
	}
	return string(out)
}

// depsOf returns what a program importing pkgs links, from go list -deps.
func depsOf(t *testing.T, pkgs ...string) []string {
	t.Helper()
	return strings.Fields(goList(t, append([]string{"-deps"}, pkgs...)...))
}

func heavyIn(deps []string) []string {
	var found []string
	for _, p := range deps {
		if slices.ContainsFunc(heavy, func(h string) bool { return strings.HasPrefix(p, h) || p == strings.TrimSuffix(h, "/") }) {
			found = append(found, p)
		}
	}
	return found
}

// Issue 13 item 8: a host that composes berth with only the SSH driver links
// no Docker engine client and no OpenTelemetry.
func TestSSHOnlyProgramLinksNoDockerOrOpenTelemetry(t *testing.T) {
	t.Parallel()
	deps := depsOf(t, "github.com/berthdev/berth", "github.com/berthdev/berth/drivers/ssh")
	// The graph is the right one: it holds the SSH client.
	if !slices.Contains(deps, "golang.org/x/crypto/ssh") {
		t.Fatalf("go list -deps does not list golang.org/x/crypto/ssh; the check looks at the wrong graph: %v", deps)
	}
	if found := heavyIn(deps); len(found) > 0 {
		t.Errorf("berth + drivers/ssh links %d heavy packages: %v", len(found), found)
	}
	// The check can fail: the Docker driver does link them.
	if found := heavyIn(depsOf(t, "github.com/berthdev/berth/drivers/docker")); len(found) == 0 {
		t.Errorf("drivers/docker links neither github.com/docker/docker nor OpenTelemetry; the check finds nothing")
	}
}

// withPrefix returns the packages of deps under module path prefix mod.
func withPrefix(deps []string, mod string) []string {
	var found []string
	for _, p := range deps {
		if p == mod || strings.HasPrefix(p, mod+"/") {
			found = append(found, p)
		}
	}
	return found
}

// Issue 25 item 1: the root package opens no database, so a host links the
// SQL driver of the dialect it names and no other: PostgreSQL alone links
// no SQLite, SQLite alone no pgx, neither links either.
func TestAStoreLinksOnlyItsDriver(t *testing.T) {
	t.Parallel()
	const sqliteMod, pgxMod = "modernc.org/sqlite", "github.com/jackc/pgx/v5"
	pg := depsOf(t, module, module+"/store/postgres")
	if len(withPrefix(pg, pgxMod)) == 0 {
		t.Fatalf("berth + store/postgres links no pgx; the check looks at the wrong graph")
	}
	if found := withPrefix(pg, sqliteMod); len(found) > 0 {
		t.Errorf("berth + store/postgres links SQLite: %v", found)
	}
	lite := depsOf(t, module, module+"/store/sqlite")
	if len(withPrefix(lite, sqliteMod)) == 0 {
		t.Fatalf("berth + store/sqlite links no modernc.org/sqlite; the check looks at the wrong graph")
	}
	if found := withPrefix(lite, pgxMod); len(found) > 0 {
		t.Errorf("berth + store/sqlite links pgx: %v", found)
	}
	root := depsOf(t, module)
	if found := append(withPrefix(root, sqliteMod), withPrefix(root, pgxMod)...); len(found) > 0 {
		t.Errorf("berth alone links a SQL driver: %v", found)
	}
}

// Issue 25 item 1: the fake driver is no default, so a program that does
// not name it does not link it.
func TestTheFakeIsLinkedOnlyWhenNamed(t *testing.T) {
	t.Parallel()
	fake := module + "/drivers/fake"
	if deps := depsOf(t, module, module+"/store/sqlite", module+"/drivers/ssh"); slices.Contains(deps, fake) {
		t.Errorf("berth + store/sqlite + drivers/ssh links %s", fake)
	}
	// The check can fail: naming it links it.
	if deps := depsOf(t, module, fake); !slices.Contains(deps, fake) {
		t.Errorf("go list -deps of berth + drivers/fake does not list it; the check finds nothing")
	}
}

// Issue 54 item 2: the plugin protocol's gRPC and protobuf are linked only
// by a host that names drivers/plugin: berth with every compiled driver and
// both stores links neither.
func TestOnlyAPluginHostLinksGRPC(t *testing.T) {
	t.Parallel()
	const grpcMod, protoMod = "google.golang.org/grpc", "google.golang.org/protobuf"
	deps := depsOf(t, module, module+"/drivers/ssh", module+"/drivers/local", module+"/drivers/docker", module+"/drivers/daytona",
		module+"/drivers/fake", module+"/store/sqlite", module+"/store/postgres", module+"/cmd/...")
	if found := append(withPrefix(deps, grpcMod), withPrefix(deps, protoMod)...); len(found) > 0 {
		t.Errorf("a host that names no plugin links %d packages of gRPC or protobuf: %v", len(found), found)
	}
	// The check can fail: naming the plugin package links them.
	deps = depsOf(t, module, module+"/drivers/plugin")
	if len(withPrefix(deps, grpcMod)) == 0 || len(withPrefix(deps, protoMod)) == 0 {
		t.Errorf("berth + drivers/plugin links no gRPC or no protobuf; the check looks at the wrong graph")
	}
}
