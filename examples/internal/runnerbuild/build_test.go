package runnerbuild

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// From an empty cache the runner is built once, static for linux/amd64,
// and found again without a build; the built binary runs.
func TestBinaryBuildsOnceFromAnEmptyCache(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	ctx := context.Background()
	cache := t.TempDir()
	var progress []string
	o := &Options{CacheDir: cache, Progress: func(m string) { progress = append(progress, m) }}
	bin, err := Binary(ctx, "amd64", o)
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) != 1 || !strings.Contains(progress[0], "linux/amd64") {
		t.Fatalf("progress = %q, want one line naming linux/amd64", progress)
	}
	if !strings.HasPrefix(bin, cache+string(filepath.Separator)) || !strings.HasSuffix(filepath.Dir(bin), "-linux-amd64") {
		t.Fatalf("binary at %s, want under %s in a -linux-amd64 directory", bin, cache)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if f.Machine != elf.EM_X86_64 {
		t.Errorf("machine %v, want EM_X86_64", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the runner has an ELF interpreter: it is not static (CGO_ENABLED=0)")
		}
	}
	f.Close()
	out, _ := exec.Command(bin).CombinedOutput()
	if !strings.Contains(string(out), "--controller is required") {
		t.Errorf("the built runner without flags says %q, want its usage error", out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}

	again, err := Binary(ctx, "amd64", o)
	if err != nil {
		t.Fatal(err)
	}
	fi2, err := os.Stat(again)
	if err != nil {
		t.Fatal(err)
	}
	if again != bin || len(progress) != 1 || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("second call: %s (progress %q): want the cached %s, not a new build", again, progress, bin)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(bin), ".build-*"))
	if len(left) != 0 {
		t.Errorf("temporary build files left: %v", left)
	}
}

// The cache key covers every file the runner is built from and the
// architecture: editing one of the runner's source files, or asking for
// another architecture, names another binary.
func TestSourceKeyFollowsTheRunnersFilesAndArchitecture(t *testing.T) {
	goPath, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	ctx := context.Background()
	root := compiledSource()
	if !isModuleRoot(root) {
		t.Fatalf("compiledSource() = %q, not the module root", root)
	}
	src := copyRunnerSource(t, goPath, root)
	amd := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	arm := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	k1, err := sourceKey(ctx, goPath, src, amd)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := sourceKey(ctx, goPath, src, amd); k != k1 {
		t.Fatalf("the key is not stable: %s then %s", k1, k)
	}
	if k, _ := sourceKey(ctx, goPath, src, arm); k == k1 {
		// The file sets differ by platform (unix.go, proc_linux.go are the
		// same here), so the key alone may match: Binary keeps the
		// architecture in the directory name as well.
		t.Logf("arm64 and amd64 list the same files")
	}
	doc := filepath.Join(src, "internal", "runner", "doc.go")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, append(b, "\n// changed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	k2, err := sourceKey(ctx, goPath, src, amd)
	if err != nil {
		t.Fatal(err)
	}
	if k2 == k1 {
		t.Fatal("editing internal/runner/doc.go did not change the key")
	}
	// A file the runner is not built from does not change it.
	if err := os.WriteFile(filepath.Join(src, "unrelated.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if k3, _ := sourceKey(ctx, goPath, src, amd); k3 != k2 {
		t.Fatal("a file outside the runner's packages changed the key")
	}
}

func TestBinaryWithoutSourceOrGo(t *testing.T) {
	ctx := context.Background()
	_, err := Binary(ctx, "amd64", &Options{SourceDir: t.TempDir(), CacheDir: t.TempDir()})
	if !errors.Is(err, ErrNoSource) {
		t.Errorf("no go.mod: %v, want ErrNoSource", err)
	}
	_, err = Binary(ctx, "amd64", &Options{Go: filepath.Join(t.TempDir(), "no-go"), CacheDir: t.TempDir()})
	if !errors.Is(err, ErrNoGo) {
		t.Errorf("no go command: %v, want ErrNoGo", err)
	}
	for _, arch := range []string{"", "AMD64", "amd64;rm", strings.Repeat("a", 17)} {
		if _, err := Binary(ctx, arch, &Options{CacheDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "architecture") {
			t.Errorf("arch %q: %v, want an error naming the architecture", arch, err)
		}
	}
}

// copyRunnerSource copies go.mod, go.sum and the directories of the module
// packages the runner is built from into a temp dir.
func copyRunnerSource(t *testing.T, goPath, root string) string {
	t.Helper()
	cmd := exec.Command(goPath, "list", "-deps", "-f", `{{if .Module}}{{if eq .Module.Path "`+Module+`"}}{{.Dir}}{{end}}{{end}}`, "./cmd/berth-runner")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		copyFile(t, filepath.Join(root, f), filepath.Join(dst, f))
	}
	for dir := range strings.FieldsSeq(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Type().IsRegular() {
				copyFile(t, filepath.Join(dir, e.Name()), filepath.Join(dst, rel, e.Name()))
			}
		}
	}
	return dst
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
