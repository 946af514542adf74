package pluginpb_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The generators' pinned versions; the Makefile's PROTOC_GEN_GO_VERSION and
// PROTOC_GEN_GO_GRPC_VERSION say the same (checked below).
const (
	genGoVersion     = "v1.36.12"
	genGoGRPCVersion = "v1.6.2"
)

// tool returns the generator name@version from the Makefile's TOOLS
// directory, or installs it from the module proxy into a temporary one.
func tool(t *testing.T, pkg, name, version string) string {
	t.Helper()
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	p := filepath.Join(base, "berth-tools", name+"-"+version+"-"+runtime.Version(), name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "install", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s@%s: %v\n%s", pkg, version, err, out)
	}
	return filepath.Join(dir, name)
}

// The generated Go code is what protoc and the pinned generators make of
// driver.proto: regenerating it changes nothing.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		if os.Getenv("BERTH_REQUIRE_REAL") != "" {
			t.Fatalf("protoc is not installed (Debian's protobuf-compiler; make prereqs installs it) and BERTH_REQUIRE_REAL is set")
		}
		t.Skip("protoc is not installed (Debian's protobuf-compiler); set BERTH_REQUIRE_REAL to fail instead")
	}
	mk, err := os.ReadFile("../../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PROTOC_GEN_GO_VERSION      := " + genGoVersion, "PROTOC_GEN_GO_GRPC_VERSION := " + genGoGRPCVersion} {
		if !bytes.Contains(mk, []byte(want)) {
			t.Errorf("the Makefile does not say %q: pin the same versions here and there", want)
		}
	}
	genGo := tool(t, "google.golang.org/protobuf/cmd/protoc-gen-go", "protoc-gen-go", genGoVersion)
	genGRPC := tool(t, "google.golang.org/grpc/cmd/protoc-gen-go-grpc", "protoc-gen-go-grpc", genGoGRPCVersion)
	out := t.TempDir()
	cmd := exec.Command(protoc, "--plugin=protoc-gen-go="+genGo, "--plugin=protoc-gen-go-grpc="+genGRPC,
		"--go_out="+out, "--go_opt=paths=source_relative", "--go-grpc_out="+out, "--go-grpc_opt=paths=source_relative", "driver.proto")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	for _, f := range []string{"driver.pb.go", "driver_grpc.pb.go"} {
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what protoc and the pinned generators make of driver.proto: run make proto and commit the result (first differing line: %q)",
				f, strings.TrimSpace(string(firstDiff(got, want))))
		}
	}
}

// firstDiff returns the first line of want that got does not have at the
// same place.
func firstDiff(got, want []byte) []byte {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range w {
		if i >= len(g) || !bytes.Equal(g[i], w[i]) {
			return w[i]
		}
	}
	return nil
}
