// Package runnerbuild builds berth's runner (cmd/berth-runner) from the
// module's own source with the go command, for the hosts in examples
// (envctl, and the server): a CLI should not ask its user to build a part
// of itself.
//
//	path, err := runnerbuild.Binary(ctx, "amd64", &runnerbuild.Options{
//	    Progress: func(msg string) { fmt.Fprintln(os.Stderr, "envctl:", msg) },
//	})
//
// A binary is built once per source and architecture: static
// (CGO_ENABLED=0), GOOS=linux, into the user's cache
// (os.UserCacheDir()/berth/runner/KEY-linux-ARCH/berth-runner), where KEY
// is a SHA-256 over the go command's version and the contents of every
// file of the module that the runner is built from (its packages' Go
// files, go.mod and go.sum), as `go list -deps` reports them for that
// platform. Any change to one of those files builds a new binary; a cache
// hit runs `go list` and builds nothing. A program built without its
// source at hand (-trimpath, or a copied binary) gets ErrNoSource; a
// machine without a go command gets ErrNoGo.
package runnerbuild

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Module is the module path the runner is built from.
const Module = "github.com/berthdev/berth"

// Package is the runner's main package.
const Package = Module + "/cmd/berth-runner"

var (
	// ErrNoSource: the module's source is not where this program was
	// compiled from (a binary install built with -trimpath, or a copied
	// binary), and Options.SourceDir does not name it.
	ErrNoSource = errors.New("runnerbuild: the berth module's source is not available")
	// ErrNoGo: no go command was found.
	ErrNoGo = errors.New("runnerbuild: no go command")
)

// Options configure Binary. The zero value (or nil) means the defaults.
type Options struct {
	// SourceDir is the root of the berth module (its go.mod). Default:
	// the directory this package was compiled from, when it still holds
	// the module's go.mod.
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

// Binary returns the path of a runner for linux/arch built from the
// module's source, building it first when the cache has none for the
// source as it is now. arch is a GOARCH value ("amd64", "arm64"). ctx
// bounds the go commands. Errors wrap ErrNoSource or ErrNoGo when those
// are why, and carry the go command's output when a build fails.
func Binary(ctx context.Context, arch string, o *Options) (string, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	if !validArch(arch) {
		return "", fmt.Errorf("runnerbuild: architecture %q: want a GOARCH such as amd64 or arm64", arch)
	}
	src := opt.SourceDir
	if src == "" {
		src = compiledSource()
	}
	if src == "" || !isModuleRoot(src) {
		return "", fmt.Errorf("%w (built without it; pass a runner binary instead)", ErrNoSource)
	}
	goCmd := opt.Go
	if goCmd == "" {
		goCmd = "go"
	}
	goPath, err := exec.LookPath(goCmd)
	if err != nil {
		return "", fmt.Errorf("%w: %v (install Go, or pass a runner binary)", ErrNoGo, err)
	}
	cache := opt.CacheDir
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("runnerbuild: cache directory: %w", err)
		}
		cache = filepath.Join(base, "berth", "runner")
	}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	key, err := sourceKey(ctx, goPath, src, env)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, key[:32]+"-linux-"+arch)
	bin := filepath.Join(dir, "berth-runner")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o100 != 0 {
		return bin, nil
	}
	if opt.Progress != nil {
		opt.Progress(fmt.Sprintf("building the runner for linux/%s from %s (once; cached in %s)", arch, src, dir))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("runnerbuild: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".build-*")
	if err != nil {
		return "", fmt.Errorf("runnerbuild: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	cmd := exec.CommandContext(ctx, goPath, "build", "-o", tmp.Name(), "./cmd/berth-runner")
	cmd.Dir, cmd.Env = src, env
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("runnerbuild: go build ./cmd/berth-runner for linux/%s: %w\n%s", arch, err, bytes.TrimSpace(out))
	}
	// Concurrent builders each rename a complete file of the same content.
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("runnerbuild: %w", err)
	}
	return bin, nil
}

// sourceKey hashes the go command's version and every module file the
// runner is built from on env's platform.
func sourceKey(ctx context.Context, goPath, src string, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, goPath, "list", "-deps",
		"-f", `{{if .Module}}{{if eq .Module.Path "`+Module+`"}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		"./cmd/berth-runner")
	cmd.Dir, cmd.Env = src, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("runnerbuild: go list the runner's files: %w\n%s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	files := []string{filepath.Join(src, "go.mod"), filepath.Join(src, "go.sum")}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.TrimSpace(sc.Text()); f != "" {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	ver := exec.CommandContext(ctx, goPath, "env", "GOVERSION")
	ver.Dir, ver.Env = src, env
	v, err := ver.Output()
	if err != nil {
		return "", fmt.Errorf("runnerbuild: go env GOVERSION: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %s\n", bytes.TrimSpace(v))
	for _, f := range slices.Compact(files) {
		rel, err := filepath.Rel(src, f)
		if err != nil {
			return "", fmt.Errorf("runnerbuild: %w", err)
		}
		fh, err := os.Open(f)
		if err != nil {
			return "", fmt.Errorf("runnerbuild: %w", err)
		}
		fmt.Fprintf(h, "file %s\n", filepath.ToSlash(rel))
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", fmt.Errorf("runnerbuild: read %s: %w", f, err)
		}
		fmt.Fprintln(h)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// compiledSource returns the module root this file was compiled in, or ""
// when it was compiled without its absolute path (-trimpath).
func compiledSource() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	// file is ROOT/examples/internal/runnerbuild/build.go.
	return filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(file))))
}

// isModuleRoot reports whether dir holds the berth module's go.mod.
func isModuleRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == Module
		}
	}
	return false
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
