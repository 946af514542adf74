package driverkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/berthdev/berth/drivers"
)

// RunnerMarkEnv is the environment variable with which a host driver
// (local, SSH) marks the runners a sandbox launched (RunnerLaunch.Env),
// and, inherited, their tasks: its value is the driver's mark of the
// sandbox. A runner runs in a session of its own, so Release finds what to
// end by this mark, not by the sandbox's process groups.
const RunnerMarkEnv = "BERTH_HOSTED_RUNNER"

// runnerLogName is the file, in the runner's state directory, that
// LaunchRunnerByExec appends the runner's output to.
const runnerLogName = "runner.log"

// writeTicketScript writes standard input to "$1" with mode 0600 (the
// directory "$2" is created 0700 first), through a temporary name so that
// the runner never reads half a ticket.
const writeTicketScript = `umask 077 && mkdir -p "$2" && cat > "$1.tmp" && mv "$1.tmp" "$1"`

// launchScript starts "$@" in its own session where the sandbox has setsid
// (else in the background, its standard streams detached all the same), so
// that the end of the driver's connection or of this command ends nothing.
// It stays in the command's working directory (the sandbox's default: the
// workspace, the configured workdir, the login directory), which the
// runner's tasks inherit when they name none.
//
// "$2" is the lease id (or ""): where the account may create one, the
// runner starts in the lease's cgroup (cgroupEnterScript).
const launchScript = `log="$1"; lease="$2"; shift 2
` + cgroupEnterScript + `if command -v setsid >/dev/null 2>&1; then
	setsid "$@" </dev/null >>"$log" 2>&1 &
else
	"$@" </dev/null >>"$log" 2>&1 &
fi`

// LaunchRunnerByExec starts the runner installed at binary in sb through
// two Execs, as RunnerIngress.Launch describes, for drivers whose sandboxes
// run a POSIX shell (sh with mkdir, cat and mv; setsid where present). The
// ticket travels on the first command's standard input into a fresh file
// of mode 0600 under stateDir, which the runner removes once read; the
// second starts "binary --controller endpoint --lease=LEASE --ticket-file
// FILE --state-dir=stateDir" in its own session, in the sandbox's default
// working directory (its tasks' default), with req.Env, its output
// appended to stateDir/runner.log. Nothing secret is in an argv. Where the
// sandbox's account is root and the host has a writable cgroup2 mount, the
// runner starts in the lease's own cgroup (cgroupParent, CgroupKillScript).
func LaunchRunnerByExec(ctx context.Context, sb drivers.Sandbox, binary, endpoint, stateDir string, req drivers.RunnerLaunch) error {
	for _, f := range []struct{ name, v string }{{"binary", binary}, {"state directory", stateDir}} {
		if !strings.HasPrefix(f.v, "/") || strings.ContainsRune(f.v, 0) {
			return fmt.Errorf("launch runner in %s: %s %q: want an absolute path", sb.ID(), f.name, f.v)
		}
	}
	if req.Lease == "" || req.Ticket == "" {
		return fmt.Errorf("launch runner in %s: %w", sb.ID(), errors.New("lease and ticket are required"))
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("launch runner in %s: %w", sb.ID(), err)
	}
	ticketFile := strings.TrimSuffix(stateDir, "/") + "/ticket-" + hex.EncodeToString(nonce[:])
	res, err := sb.Exec(ctx, drivers.Command{
		Argv:  []string{"sh", "-c", writeTicketScript, "sh", ticketFile, stateDir},
		Stdin: strings.NewReader(req.Ticket),
	})
	if err != nil {
		return fmt.Errorf("launch runner in %s: write the ticket file: %w", sb.ID(), err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("launch runner in %s: write the ticket file under %s: exit %d: %s", sb.ID(), stateDir, res.ExitCode, bounded(res.Stderr))
	}
	cg := req.Lease
	if !cgroupName(cg) {
		cg = ""
	}
	// --lease= and --state-dir= are one argument each: a check that
	// cannot read the runner's environment (the runner is not dumpable,
	// so another process of its account cannot) finds it by its command
	// line, which /proc shows to every process.
	argv := []string{"sh", "-c", launchScript, "sh", strings.TrimSuffix(stateDir, "/") + "/" + runnerLogName, cg,
		binary, "--controller", endpoint, "--lease=" + req.Lease, "--ticket-file", ticketFile, "--state-dir=" + stateDir}
	res, err = sb.Exec(ctx, drivers.Command{Argv: argv, Env: req.Env})
	if err != nil {
		return fmt.Errorf("launch runner in %s: %w", sb.ID(), err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("launch runner in %s: %s: exit %d: %s", sb.ID(), binary, res.ExitCode, bounded(res.Stderr))
	}
	return nil
}

// logTailScript prints the last "$2" bytes of "$1", or nothing when there
// is no such file.
const logTailScript = `[ -f "$1" ] || exit 0; exec tail -c "$2" "$1"`

// maxLogTail is the most RunnerIngress.LogTail returns: 64 KiB.
const maxLogTail = 64 << 10

// ClampLogTail returns n clamped to 1..65536 (64 KiB), as
// RunnerIngress.LogTail takes its limit.
func ClampLogTail(n int) int { return min(max(n, 1), maxLogTail) }

// RunnerLogTailByExec returns at most the last limit bytes (clamped by
// ClampLogTail) of stateDir/runner.log, the log LaunchRunnerByExec
// appends to, through one Exec of tail -c in sb (RunnerIngress.LogTail
// for drivers whose sandboxes run a POSIX shell with tail). It returns
// nil when the file does not exist.
func RunnerLogTailByExec(ctx context.Context, sb drivers.Sandbox, stateDir string, limit int) ([]byte, error) {
	if !strings.HasPrefix(stateDir, "/") || strings.ContainsRune(stateDir, 0) {
		return nil, fmt.Errorf("runner log of %s: state directory %q: want an absolute path", sb.ID(), stateDir)
	}
	n := ClampLogTail(limit)
	file := strings.TrimSuffix(stateDir, "/") + "/" + runnerLogName
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", logTailScript, "sh", file, strconv.Itoa(n)}, OutputLimit: n})
	if err != nil {
		return nil, fmt.Errorf("runner log of %s: %s: %w", sb.ID(), file, err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("runner log of %s: %s: tail exit %d: %s", sb.ID(), file, res.ExitCode, bounded(res.Stderr))
	}
	if len(res.Stdout) == 0 {
		return nil, nil
	}
	return res.Stdout, nil
}

// bounded renders at most 200 bytes of a command's stderr.
func bounded(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
