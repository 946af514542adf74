package docker

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// The first command of a warm sandbox (drivers.AcquireRequest.Warm: a
// warm-pool member, idle until it is handed out) on a unix:// engine runs
// through an exec that Acquire started ahead. Starting an exec is the engine's dearest
// step of a command: under gVisor's runsc about 60 ms on the test machine
// (the runtime's binary runs twice per exec), against about 10 for the
// primed exec to run its command; it was the whole of a pooled
// acquisition's first exec. The primed exec is a sh that reads one line
// from its stdin and evals it: the line exports the command's environment
// and the marker (as wrapperScript does), sets the command's arguments
// and execs it in the sh's place, so the command is the exec's process:
// its output is the exec's output, its status the exec's status, and a
// kill finds it by its marker. The rest of the stdin is the command's; a
// command without stdin sees it closed at once. A primed exec serves one
// command, and only as the first thing run in the sandbox through its
// handle: a terminal or a runner opened first closes it (so no process of
// a command can have reached the sh's stdin through /proc before the
// line is written), and a command it cannot carry exactly (another
// working directory, an environment variable the shell treats specially,
// a NUL byte) closes it unused and takes the ordinary path.
const primedScript = `berth_nl='
'
IFS= read -r berth_cmd || exit 0
eval "$berth_cmd"`

// primeTimeout bounds the priming within Acquire: it is best effort, and
// an engine that does not start the exec by then costs the member its
// primed first command, not its start.
const primeTimeout = 20 * time.Second

// primedExec is an exec started ahead, its sh waiting for its line.
type primedExec struct {
	execID string
	hj     types.HijackedResponse
}

// prime starts the exec that the sandbox's first command will run
// through and waits until the engine reports it running.
func (s *sandbox) prime(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, primeTimeout)
	defer cancel()
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env:        s.execEnv(nil),
		WorkingDir: s.cfg.workdir,
		Cmd:        []string{"/bin/sh", "-c", primedScript, "berth-exec"},
	})
	if err != nil {
		return engineErr(s.cfg.host, "prime an exec in container "+s.id, err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return engineErr(s.cfg.host, "attach the primed exec in container "+s.id, err)
	}
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		ins, err := s.cli.ContainerExecInspect(ctx, created.ID)
		switch {
		case err != nil:
			hj.Close()
			return engineErr(s.cfg.host, "inspect the primed exec in container "+s.id, err)
		case ins.Running:
			s.primedMu.Lock()
			defer s.primedMu.Unlock()
			if s.released.Load() {
				hj.Close()
				return fmt.Errorf("docker %s: container %s: %w", s.cfg.host, s.id, drivers.ErrReleased)
			}
			s.primed = &primedExec{execID: created.ID, hj: hj}
			return nil
		case execEnded(ins):
			hj.Close()
			return fmt.Errorf("docker %s: container %s: the primed exec ended at start (code %d)", s.cfg.host, s.id, ins.ExitCode)
		}
		select {
		case <-ctx.Done():
			hj.Close()
			return fmt.Errorf("docker %s: container %s: waiting for the primed exec: %w", s.cfg.host, s.id, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// takePrimed returns the primed exec, if any, and forgets it: it serves
// one command.
func (s *sandbox) takePrimed() *primedExec {
	s.primedMu.Lock()
	defer s.primedMu.Unlock()
	pr := s.primed
	s.primed = nil
	return pr
}

// closePrimed ends an unused primed exec: its sh reads the end of its
// stdin and exits without running anything.
func (s *sandbox) closePrimed() {
	if pr := s.takePrimed(); pr != nil {
		pr.hj.Close()
	}
}

// startPrimed runs cmd through pr, or returns nil (pr closed) when pr
// cannot carry cmd or its sh no longer runs: the caller takes the
// ordinary path then. Once the line is written the command is pr's.
func (s *sandbox) startPrimed(ctx context.Context, pr *primedExec, cmd drivers.Command, stdout, stderr io.Writer) *process {
	marker := randomHex(8)
	line, ok := s.primedLine(cmd, marker)
	if !ok {
		pr.hj.Close()
		return nil
	}
	started := time.Now()
	// Nothing has run in the sandbox since the sh started (a warm member
	// has had no command), but its exec is checked before the command is
	// given to it: a line written to a sh that is gone would report the
	// sh's status as the command's.
	ins, err := s.cli.ContainerExecInspect(ctx, pr.execID)
	if err != nil || !ins.Running {
		pr.hj.Close()
		return nil
	}
	if _, err := pr.hj.Conn.Write([]byte(line)); err != nil {
		// Without its newline the sh runs nothing: it reads the end of its
		// stdin and exits.
		pr.hj.Close()
		return nil
	}
	p := &process{s: s, execID: pr.execID, marker: marker, hj: pr.hj, started: started, stdin: cmd.Stdin != nil,
		done: make(chan struct{}), finished: make(chan struct{})}
	if cmd.Stdin == nil {
		_ = pr.hj.CloseWrite()
	}
	p.copyOutput(stdout, stderr)
	if cmd.Stdin != nil {
		driverkit.CopyStdin(closeWriter{pr.hj}, cmd.Stdin, p.finished)
	}
	go p.run(ctx)
	return p
}

// shSpecial are the variables a POSIX shell sets or reads itself: a
// command's environment that names one is not exported by the primed sh
// (its value would not reach the command as given).
var shSpecial = map[string]bool{"IFS": true, "PPID": true, "PWD": true, "OLDPWD": true, "OPTIND": true, "OPTARG": true,
	"LINENO": true, "ENV": true, "PS1": true, "PS2": true, "PS4": true, "HISTFILE": true, "MAIL": true, "MAILPATH": true,
	"BASH_ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "CDPATH": true, "FCEDIT": true, "HISTSIZE": true}

// primedLine is the line the primed sh evals to run cmd with marker:
// the command's environment and the marker exported, its arguments set,
// and it execed. ok is false when cmd needs what the line cannot give
// exactly: a working directory other than the configured one, a variable
// name the shell treats specially or cannot export, a NUL byte.
func (s *sandbox) primedLine(cmd drivers.Command, marker string) (string, bool) {
	if cmd.Dir != "" && cmd.Dir != s.cfg.workdir {
		return "", false
	}
	var b strings.Builder
	for _, k := range sortedKeys(cmd.Env) {
		v := cmd.Env[k]
		if !shName(k) || shSpecial[k] || strings.HasPrefix(k, "berth_") || strings.ContainsRune(v, 0) {
			return "", false
		}
		b.WriteString("export " + k + "=" + shQuote(v) + "; ")
	}
	b.WriteString("export " + markerEnv + "=" + shQuote(marker) + "; set --")
	for _, a := range cmd.Argv {
		if strings.ContainsRune(a, 0) {
			return "", false
		}
		b.WriteString(" " + shQuote(a))
	}
	b.WriteString(`; exec "$@"` + "\n")
	return b.String(), true
}

// shName reports whether k is a name a POSIX shell can export.
func shName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// shQuote quotes v for the primed sh's one line: single quotes, a quote
// as '\” and a newline as the sh's berth_nl (the line has none).
func shQuote(v string) string {
	v = strings.ReplaceAll(v, "'", `'\''`)
	v = strings.ReplaceAll(v, "\n", `'"$berth_nl"'`)
	return "'" + v + "'"
}
