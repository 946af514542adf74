package runnerbin

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/elfarch"
)

func needGo(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("BERTH_REQUIRE_REAL") != "" {
			t.Fatalf("no go command: %v", err)
		}
		t.Skip("no go command")
	}
	return p
}

// checkRunner asserts that bin is a linux/arch ELF executable.
func checkRunner(t *testing.T, bin, arch string) {
	t.Helper()
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := elfarch.Of(f); got != arch {
		t.Errorf("%s is an ELF file for %q, want %s", bin, got, arch)
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("%s is not executable: %v", bin, err)
	}
}

// Issue 49 item 3: in berth's own module the runner is built from this
// checkout, once: a second call finds it in the cache and builds nothing.
func TestBinaryFromCheckoutIsBuiltOnce(t *testing.T) {
	needGo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache := t.TempDir()
	var said []string
	o := &Options{CacheDir: cache, Progress: func(m string) { said = append(said, m) }}
	bin, err := Binary(ctx, runtime.GOARCH, o)
	if err != nil {
		t.Fatal(err)
	}
	checkRunner(t, bin, runtime.GOARCH)
	if len(said) != 1 || !strings.Contains(said[0], "building the runner for linux/"+runtime.GOARCH) || !strings.HasPrefix(bin, cache) {
		t.Errorf("progress %q, binary %s; want one build line and a binary in %s", said, bin, cache)
	}
	again, err := Binary(ctx, runtime.GOARCH, o)
	if err != nil || again != bin || len(said) != 1 {
		t.Errorf("second call: %s, %v, progress %q; want %s from the cache and no build", again, err, said, bin)
	}
}

// A path the host gives is returned (absolute) and nothing is built; one
// for another architecture, or not a file, is refused.
func TestBinaryPath(t *testing.T) {
	dir := t.TempDir()
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	write := func(name string, machine elf.Machine) string {
		h := make([]byte, 64)
		copy(h, "\x7fELF")
		h[4], h[5], h[6] = 2, 1, 1
		binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_EXEC))
		binary.LittleEndian.PutUint16(h[18:], uint16(machine))
		binary.LittleEndian.PutUint32(h[20:], 1)
		binary.LittleEndian.PutUint16(h[52:], 64)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, h, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	amd, arm := write("amd", elf.EM_X86_64), write("arm", elf.EM_AARCH64)
	rel, err := filepath.Rel(mustGetwd(t), amd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Binary(context.Background(), "amd64", &Options{Path: rel, Go: "/nonexistent/go"})
	if err != nil || got != amd {
		t.Errorf("path %s: %q, %v; want %s", rel, got, err, amd)
	}
	if _, err := Binary(context.Background(), "amd64", &Options{Path: arm}); err == nil || !strings.Contains(err.Error(), "is for arm64") {
		t.Errorf("an arm64 binary for amd64: %v, want it refused naming arm64", err)
	}
	if _, err := Binary(context.Background(), other, &Options{Path: dir}); err == nil {
		t.Error("a directory as the binary: no error")
	}
	if _, err := Binary(context.Background(), "AMD 64", nil); err == nil {
		t.Error("a malformed architecture: no error")
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// Without a go command, or without berth's source, Binary says so and
// how to name a binary instead.
func TestBinaryWithoutGoOrSource(t *testing.T) {
	_, err := Binary(context.Background(), "amd64", &Options{Go: "/nonexistent/go", CacheDir: t.TempDir()})
	if !errors.Is(err, ErrNoGo) || !strings.Contains(err.Error(), "RunnerBinary") {
		t.Errorf("no go command: %v, want ErrNoGo naming RunnerBinary", err)
	}
	needGo(t)
	_, err = Binary(context.Background(), "amd64", &Options{SourceDir: t.TempDir(), CacheDir: t.TempDir()})
	if !errors.Is(err, ErrNoSource) {
		t.Errorf("a source directory without berth's go.mod: %v, want ErrNoSource", err)
	}
	b := builder{goPath: needGo(t), cache: t.TempDir(), arch: runtime.GOARCH, env: append(os.Environ(), "GOMODCACHE="+t.TempDir())}
	if _, err := b.fromModuleCache(context.Background(), "v0.0.1"); !errors.Is(err, ErrNoSource) || !strings.Contains(err.Error(), "not in the module cache") {
		t.Errorf("a version the module cache has not: %v, want ErrNoSource", err)
	}
}

// Issue 49 item 3: in a host of another module, berth's source is in the
// module cache: the runner is built in a temporary module that requires
// berth at its version with GOPROXY=off (nothing fetched), once per
// version, module hash and go version. The module cache here is a fresh
// one, filled as a host's build fills it: berth's module (this checkout's
// HEAD, served by a file proxy) and its dependencies.
func TestBinaryFromTheModuleCache(t *testing.T) {
	goPath := needGo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := compiledSource()
	if _, err := exec.LookPath("git"); err != nil || !isModuleRoot(root) {
		t.Skip("no git command or no checkout of berth")
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	const version = "v0.49.0"
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy", "github.com", "berthdev", "berth", "@v")
	if err := os.MkdirAll(proxy, 0o755); err != nil {
		t.Fatal(err)
	}
	arch := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=zip", "--prefix="+module+"@"+version+"/", "-o", filepath.Join(proxy, version+".zip"),
		"HEAD", "--", ".", ":(exclude)internal/tcbench")
	if out, err := arch.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
	gomod, err := exec.CommandContext(ctx, "git", "-C", root, "show", "HEAD:go.mod").Output()
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{version + ".mod": string(gomod), version + ".info": `{"Version":"` + version + `"}`, "list": version + "\n"} {
		if err := os.WriteFile(filepath.Join(proxy, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	realCache, err := exec.CommandContext(ctx, goPath, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	modcache := filepath.Join(tmp, "modcache")
	env := append(os.Environ(), "GOMODCACHE="+modcache, "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off",
		"GOPROXY=file://"+filepath.Join(tmp, "proxy")+",file://"+filepath.Join(strings.TrimSpace(string(realCache)), "cache", "download"))
	t.Cleanup(func() {
		c := exec.Command(goPath, "clean", "-modcache")
		c.Env = env
		_ = c.Run() // the module cache is read-only: only go clean removes it
	})
	// The host: a module that requires berth, listed (as a build would)
	// with the proxies; this fills the fresh module cache.
	host := filepath.Join(tmp, "host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "go.mod"), []byte("module example.com/host\n\ngo 1.26\n\nrequire "+module+" "+version+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fill := exec.CommandContext(ctx, goPath, "list", "-deps", pkgPath)
	fill.Dir, fill.Env = host, append(env, "CGO_ENABLED=0", "GOOS=linux")
	if out, err := fill.CombinedOutput(); err != nil {
		t.Fatalf("fill the module cache: %v\n%s", err, out)
	}

	cache := t.TempDir()
	var said []string
	b := builder{goPath: goPath, cache: cache, arch: runtime.GOARCH, progress: func(m string) { said = append(said, m) },
		env: append(os.Environ(), "GOMODCACHE="+modcache, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)}
	bin, err := b.fromModuleCache(ctx, version)
	if err != nil {
		t.Fatal(err)
	}
	checkRunner(t, bin, runtime.GOARCH)
	if len(said) != 1 || !strings.Contains(said[0], filepath.Join(modcache, module+"@"+version)) {
		t.Errorf("progress %q; want one build from the module cache's %s@%s", said, module, version)
	}
	again, err := b.fromModuleCache(ctx, version)
	if err != nil || again != bin || len(said) != 1 {
		t.Errorf("second build: %s, %v, progress %q; want %s from the cache", again, err, said, bin)
	}
	if v := cacheVersion(filepath.Join(modcache, module+"@"+version)); v != version {
		t.Errorf("cacheVersion of the module cache's directory = %q, want %s", v, version)
	}
}
