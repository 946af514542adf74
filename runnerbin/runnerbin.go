// Package runnerbin returns berth's runner binary (cmd/berth-runner) for a
// host: the path the host names, or one built from berth's source with the
// go command, so that a host need not build a part of berth itself.
//
//	path, err := runnerbin.Binary(ctx, "amd64", nil) // built once, then cached
//
// berth.New uses it when a host asks for runners (lease.AcquireRequest.
// WithRunner, a runner pool) and names no binary (berth.Options.
// RunnerBinary, RunnerSet).
//
// Where the source comes from:
//
//   - In berth's own module (its tests, examples/envctl), or a host that
//     replaces berth with a checkout, the source is the directory this
//     package was compiled from; the build runs there. The cache key is a
//     SHA-256 over the go command's version and every file of the module
//     that the runner is built from (go list -deps), go.mod and go.sum.
//   - In a host of another module, berth's source is in the module cache
//     (this package was compiled from it, or debug.ReadBuildInfo names
//     berth's version): the build runs in a temporary module that
//     requires berth at that version, with GOPROXY=off (nothing is
//     fetched: the module cache has what the host was built with),
//     GOFLAGS=-mod=mod and GOSUMDB=off (the cache's modules were verified
//     when they were downloaded). The cache key is the go command's version
//     and berth's version and module hash (go mod download's Sum).
//
// Binaries are static (CGO_ENABLED=0), GOOS=linux, kept in the user's cache
// (os.UserCacheDir()/berth/runner/KEY-linux-ARCH/berth-runner) and built
// again only when the key changes. Without a path, a source or a go
// command, Binary fails with an error wrapping ErrNoSource or ErrNoGo that
// says how to name a binary instead.
package runnerbin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/elfarch"
)

// module is the module path the runner is built from.
const module = "github.com/berthdev/berth"

// pkgPath is the runner's main package.
const pkgPath = module + "/cmd/berth-runner"

// buildHint says how to build a runner binary by hand.
const buildHint = "CGO_ENABLED=0 GOOS=linux go build -o berth-runner " + pkgPath

var (
	// ErrNoSource is wrapped when berth's source cannot be found: this
	// program was built with -trimpath and without module information
	// naming berth's version, or from a copied source, and
	// Options.SourceDir names none.
	ErrNoSource = errcode.New(errcode.Unsupported, "runnerbin: berth's source is not available to build the runner")
	// ErrNoGo is wrapped when no go command is found to build the runner.
	ErrNoGo = errcode.New(errcode.Unsupported, "runnerbin: no go command to build the runner")
)

// Options configure Binary. The zero value (or nil) builds from berth's
// source into the user's cache with the go command from $PATH.
type Options struct {
	// Path names a runner binary the host built: Binary returns it (made
	// absolute) after checking that it is a regular file, and, when it is
	// an ELF file of a known architecture, that it is arch's; nothing is
	// built. Default "": build.
	Path string
	// SourceDir is the root of a berth checkout (its go.mod) to build
	// from. Default "": found as the package doc says.
	SourceDir string
	// CacheDir holds the built binaries. Default:
	// os.UserCacheDir()/berth/runner.
	CacheDir string
	// Go is the go command. Default: "go" from $PATH.
	Go string
	// Progress, if not nil, is told one line before a build starts (a
	// cache hit says nothing).
	Progress func(msg string)
}

// Binary returns the path of berth's runner for linux/arch (a GOARCH:
// "amd64", "arm64"): o.Path when set, else a binary built from berth's
// source, building it first when the cache has none for the source and go
// command as they are. ctx bounds the go commands. Errors wrap ErrNoSource
// or ErrNoGo when those are why, and carry the go command's output when a
// build fails.
func Binary(ctx context.Context, arch string, o *Options) (string, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	if !validArch(arch) {
		return "", fmt.Errorf("runnerbin: architecture %q: want a GOARCH such as amd64 or arm64", arch)
	}
	if opt.Path != "" {
		return checkPath(opt.Path, arch)
	}
	goCmd := cmp.Or(opt.Go, "go")
	goPath, err := exec.LookPath(goCmd)
	if err != nil {
		return "", fmt.Errorf("runnerbin: %w (%v): install Go, or name a runner binary (berth.Options.RunnerBinary; %s)", ErrNoGo, err, buildHint)
	}
	cache := opt.CacheDir
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("runnerbin: cache directory: %w", err)
		}
		cache = filepath.Join(base, "berth", "runner")
	}
	b := builder{goPath: goPath, cache: cache, arch: arch, progress: opt.Progress,
		env: append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)}
	if src := opt.SourceDir; src != "" {
		if !isModuleRoot(src) {
			return "", fmt.Errorf("runnerbin: %w: Options.SourceDir %q holds no go.mod of %s", ErrNoSource, src, module)
		}
		return b.fromCheckout(ctx, src)
	}
	if src := compiledSource(); src != "" && isModuleRoot(src) {
		if v := cacheVersion(src); v != "" {
			return b.fromModuleCache(ctx, v)
		}
		return b.fromCheckout(ctx, src)
	}
	if v := buildInfoVersion(); v != "" {
		return b.fromModuleCache(ctx, v)
	}
	return "", fmt.Errorf("runnerbin: %w (this program was built without it: -trimpath and no module version of %s); name a runner binary (berth.Options.RunnerBinary; %s)", ErrNoSource, module, buildHint)
}

// builder builds the runner for linux/arch.
type builder struct {
	goPath, cache, arch string
	env                 []string
	progress            func(string)
}

// fromCheckout builds in src, a berth checkout, keyed by its files.
func (b builder) fromCheckout(ctx context.Context, src string) (string, error) {
	key, err := b.checkoutKey(ctx, src)
	if err != nil {
		return "", err
	}
	return b.build(ctx, key, src, src, "./cmd/berth-runner")
}

// fromModuleCache builds berth's runner at version from the module cache,
// in a temporary module that requires it, fetching nothing.
func (b builder) fromModuleCache(ctx context.Context, version string) (string, error) {
	tmp, err := os.MkdirTemp("", "berth-runnerbin-")
	if err != nil {
		return "", fmt.Errorf("runnerbin: %w", err)
	}
	defer os.RemoveAll(tmp)
	mod := fmt.Sprintf("module berth.runnerbin.local/build\n\ngo 1.26\n\nrequire %s %s\n", module, version)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(mod), 0o644); err != nil {
		return "", fmt.Errorf("runnerbin: %w", err)
	}
	env := append(slices.Clone(b.env), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off")
	dl := exec.CommandContext(ctx, b.goPath, "mod", "download", "-json", module+"@"+version)
	dl.Dir, dl.Env = tmp, env
	out, err := dl.Output()
	var info struct{ Dir, Sum, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Error != "" || info.Sum == "" {
		return "", fmt.Errorf("runnerbin: %w: %s@%s is not in the module cache (GOPROXY=off): %v %s; name a runner binary (berth.Options.RunnerBinary; %s)",
			ErrNoSource, module, version, err, strings.TrimSpace(info.Error), buildHint)
	}
	v, err := b.goVersion(ctx, tmp)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte("go " + v + "\nmodule " + module + "@" + version + " " + info.Sum + "\n"))
	bb := b
	bb.env = env
	return bb.build(ctx, hex.EncodeToString(h[:]), tmp, info.Dir, pkgPath)
}

// build runs go build of pkg in dir into the cache directory of key,
// unless a binary is there already.
func (b builder) build(ctx context.Context, key, dir, src, pkg string) (string, error) {
	out := filepath.Join(b.cache, key[:32]+"-linux-"+b.arch)
	bin := filepath.Join(out, "berth-runner")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o100 != 0 {
		return bin, nil
	}
	if b.progress != nil {
		b.progress(fmt.Sprintf("building the runner for linux/%s from %s (once; cached in %s)", b.arch, src, out))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("runnerbin: %w", err)
	}
	tmp, err := os.CreateTemp(out, ".build-*")
	if err != nil {
		return "", fmt.Errorf("runnerbin: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	cmd := exec.CommandContext(ctx, b.goPath, "build", "-o", tmp.Name(), pkg)
	cmd.Dir, cmd.Env = dir, b.env
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("runnerbin: go build %s for linux/%s: %w\n%s", pkg, b.arch, err, bytes.TrimSpace(o))
	}
	// Concurrent builders each rename a complete file of the same content.
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("runnerbin: %w", err)
	}
	return bin, nil
}

// checkoutKey hashes the go command's version and every module file the
// runner is built from on the builder's platform.
func (b builder) checkoutKey(ctx context.Context, src string) (string, error) {
	cmd := exec.CommandContext(ctx, b.goPath, "list", "-deps",
		"-f", `{{if .Module}}{{if eq .Module.Path "`+module+`"}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		"./cmd/berth-runner")
	cmd.Dir, cmd.Env = src, b.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("runnerbin: go list the runner's files: %w\n%s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	files := []string{filepath.Join(src, "go.mod"), filepath.Join(src, "go.sum")}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.TrimSpace(sc.Text()); f != "" {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	v, err := b.goVersion(ctx, src)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %s\n", v)
	for _, f := range slices.Compact(files) {
		rel, err := filepath.Rel(src, f)
		if err != nil {
			return "", fmt.Errorf("runnerbin: %w", err)
		}
		fh, err := os.Open(f)
		if err != nil {
			return "", fmt.Errorf("runnerbin: %w", err)
		}
		fmt.Fprintf(h, "file %s\n", filepath.ToSlash(rel))
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", fmt.Errorf("runnerbin: read %s: %w", f, err)
		}
		fmt.Fprintln(h)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// goVersion returns the go command's GOVERSION.
func (b builder) goVersion(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, b.goPath, "env", "GOVERSION")
	cmd.Dir, cmd.Env = dir, b.env
	v, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("runnerbin: go env GOVERSION: %w", err)
	}
	return string(bytes.TrimSpace(v)), nil
}

// compiledSource returns the module root this file was compiled in, or ""
// when it was compiled without its absolute path (-trimpath).
func compiledSource() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	// file is ROOT/runnerbin/runnerbin.go.
	return filepath.Dir(filepath.Dir(file))
}

// cacheVersion returns berth's version when root is its directory in the
// module cache (".../github.com/berthdev/berth@VERSION"), else "".
func cacheVersion(root string) string {
	_, v, ok := strings.Cut(filepath.Base(root), "@")
	if !ok || !strings.HasPrefix(filepath.Base(root), "berth@") {
		return ""
	}
	return v
}

// buildInfoVersion returns the version of berth this program was built
// with from the module cache (a dependency not replaced), or "".
func buildInfoVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == module && d.Replace == nil && d.Version != "" && d.Version != "(devel)" {
			return d.Version
		}
	}
	return ""
}

// isModuleRoot reports whether dir holds berth's go.mod.
func isModuleRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == module
		}
	}
	return false
}

// Spec returns the drivers.RunnerSpec of the runner binary at path: its
// absolute path, the hex SHA-256 of its bytes and, when it is an ELF file
// of a known architecture, that architecture (Arch "" otherwise: a driver
// finds out at install). It is what lease.AcquireRequest.Runner and
// berth.Options.RunnerSet carry. A path that is not a regular file is an
// error.
func Spec(path string) (drivers.RunnerSpec, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return drivers.RunnerSpec{}, fmt.Errorf("runnerbin: runner binary %q: %w", path, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return drivers.RunnerSpec{}, fmt.Errorf("runnerbin: runner binary: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return drivers.RunnerSpec{}, fmt.Errorf("runnerbin: runner binary %q: not a regular file", abs)
	}
	hash := sha256.New()
	if _, err := io.Copy(hash, f); err != nil {
		return drivers.RunnerSpec{}, fmt.Errorf("runnerbin: runner binary %q: %w", abs, err)
	}
	return drivers.RunnerSpec{Binary: abs, SHA256: hex.EncodeToString(hash.Sum(nil)), Arch: elfarch.Of(f)}, nil
}

// checkPath returns path made absolute when it is a regular file and not
// an ELF file of another architecture than arch.
func checkPath(path, arch string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("runnerbin: runner binary %q: %w", path, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", fmt.Errorf("runnerbin: runner binary: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("runnerbin: runner binary %q is not a regular file", abs)
	}
	if a := elfarch.Of(f); a != "" && a != arch {
		return "", fmt.Errorf("runnerbin: runner binary %q is for %s, not %s", abs, a, arch)
	}
	return abs, nil
}

func validArch(a string) bool {
	if a == "" || len(a) > 16 {
		return false
	}
	for _, r := range a {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}
