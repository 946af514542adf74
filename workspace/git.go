package workspace

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/tarsafe"
)

// A Git source is fetched on the host with the host's git command, at
// Depth commits of history (shallow: 1 by default), into a repository of
// its own whose HEAD is a branch named workspace at the ref's commit,
// with no remote (the source URL, which may hold a credential helper's
// name, never goes in). Where the target has git, that repository goes
// into the sandbox as files, .git included, so the agent can commit; a
// bundle cannot carry a shallow history (git cannot clone one), so the
// repository's own files are the transport. Where the target has no git,
// only the checked-out files go in, and the commit is recorded.

// gitCheckout makes the host's repository of req's Git source in a new
// temporary directory and returns it with the commit; the caller removes
// the directory.
func gitCheckout(ctx context.Context, req PrepareRequest) (dir, commit string, err error) {
	dir, err = os.MkdirTemp("", "berth-ws-git-")
	if err != nil {
		return "", "", err
	}
	fail := func(what string, err error) (string, string, error) {
		_ = os.RemoveAll(dir)
		return "", "", &errcode.Error{Code: errcode.Invalid, Op: "prepare workspace", Target: "workspace " + req.Key, Field: "source",
			Message: fmt.Sprintf("Could not %s the Git repository %s at %q on this host: check the location and the ref, and that git is installed.", what, req.Source.Location, cmpStr(req.Source.Ref, "HEAD")),
			Err:     err}
	}
	ref := cmpStr(req.Source.Ref, "HEAD")
	if strings.HasPrefix(ref, "-") || strings.HasPrefix(req.Source.Location, "-") {
		return fail("read", fmt.Errorf("a ref or location that starts with -"))
	}
	depth := req.Depth
	if depth == 0 {
		depth = 1
	}
	loc := req.Source.Location
	if !strings.Contains(loc, "://") {
		if fi, err := os.Stat(loc); err == nil && fi.IsDir() {
			if abs, err := filepath.Abs(loc); err == nil {
				loc = "file://" + abs // depth applies to a local path only as a URL
			}
		}
	}
	fetch := []string{"fetch", "-q", "--no-tags"}
	if depth > 0 {
		fetch = append(fetch, "--depth", strconv.Itoa(depth))
	}
	steps := [][]string{
		{"init", "-q", "-b", "workspace"},
		append(fetch, "--", loc, ref),
		{"checkout", "-q", "-B", "workspace", "FETCH_HEAD"},
	}
	for _, s := range steps {
		if out, err := git(ctx, dir, s...); err != nil {
			return fail("fetch", fmt.Errorf("git %s: %w: %s", s[0], err, out))
		}
	}
	_ = os.Remove(filepath.Join(dir, ".git", "FETCH_HEAD")) // it names the source
	out, err := git(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return fail("read", err)
	}
	return dir, strings.TrimSpace(out), nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "protocol.file.allow=always", "-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0") // never ask on a terminal
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	s := b.String()
	if len(s) > 2048 {
		s = s[:2048]
	}
	return s, err
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// gitExclude is the exclude list of a Git source's files: the request's
// (or the default), with the .git directory left out entirely when the
// repository does not go in, and its config kept when it does (berth
// wrote it: no remote, no credential).
func gitExclude(req PrepareRequest, withRepo bool) []string {
	ex := req.Exclude
	if ex == nil {
		ex = tarsafe.DefaultExclude()
	}
	ex = slices.DeleteFunc(slices.Clone(ex), func(p string) bool { return p == ".git/config" })
	if !withRepo {
		ex = append(ex, ".git")
	}
	if len(ex) == 0 {
		ex = []string{".git/nothing-left-out"} // nil would mean the default
	}
	return ex
}

// withoutGit drops the .git directory's entries from a manifest: a Git
// workspace's tree hash is its working files'.
func withoutGit(m manifest) manifest {
	return slices.DeleteFunc(m, func(e entry) bool { return e.path == ".git" || strings.HasPrefix(e.path, ".git/") })
}

// sandboxGit runs git in the workspace's directory in the sandbox and
// returns its stdout; a non-zero exit is an error.
func sandboxGit(ctx context.Context, h *lease.Handle, w *Workspace, limit int64, script string, args ...string) ([]byte, error) {
	argv := append([]string{"sh", "-c", "cd -- \"$1\" || exit 1\n" + script, "berth-ws", w.rel()}, args...)
	res, err := h.Exec(ctx, lease.Command{Argv: argv, OutputLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("workspace %s: git in lease %s: %w", w.ID, h.ID(), err)
	}
	if res.ExitCode != 0 || res.Truncated {
		return nil, &errcode.Error{Op: "collect workspace", Target: "workspace " + w.Key,
			Message: fmt.Sprintf("Git in the sandbox failed on workspace %s (exit status %d, or past %d MiB).", w.Key, res.ExitCode, limit>>20),
			Err:     fmt.Errorf("git: exit status %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))}
	}
	return res.Stdout, nil
}
