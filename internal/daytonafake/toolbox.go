package daytonafake

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berthdev/berth/internal/syncbuf"
)

// executeBody is the toolbox's ExecuteRequest, every field.
type executeBody struct {
	Command string            `json:"command"`
	Cwd     *string           `json:"cwd"`
	Envs    map[string]string `json:"envs"`
	Timeout *uint32           `json:"timeout"`
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// execute is the toolbox's POST /process/execute, run for real, shaped by
// the sandbox's daemonVersion as apps/daemon/pkg/toolbox/process/execute.go
// was at each version: from v0.156.0 the command is fed on stdin to the
// shell the daemon picks (Knobs.Shell here; the daemon takes zsh, then
// bash, then sh from /etc/shells, apps/daemon/pkg/common/get_shell.go);
// before, it was split on spaces (quotes grouping, no escapes) and run with
// no shell; envs are applied from v0.167.0 only; before v0.155.0 an
// omitted timeout means 360 s. The command runs in its own process group,
// with the sandbox's home directory as the default cwd and its tmp
// directory as TMPDIR; stdout and stderr are combined. A timeout (whole
// seconds, 0 for none) kills the group and answers 408. Like the daemon,
// the fake does not end a command whose request was cancelled; stopping or
// deleting the sandbox, or closing the server, kills it.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	var req executeBody
	if err := decodeStrict(r, &req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		toolboxError(w, r, http.StatusBadRequest, "command cannot be empty or whitespace-only")
		return
	}
	keys := make([]string, 0, len(req.Envs))
	for k := range req.Envs {
		if !envKeyRE.MatchString(k) {
			toolboxError(w, r, http.StatusBadRequest, fmt.Sprintf("invalid environment variable name %q", k))
			return
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)

	s.mu.Lock()
	id := r.PathValue("sandboxId")
	sb := s.sandboxes[id]
	if sb != nil {
		s.advance(sb, false)
	}
	switch {
	case s.closed:
		s.mu.Unlock()
		toolboxError(w, r, http.StatusServiceUnavailable, "server closing")
		return
	case sb == nil || sb.state == "destroyed" || sb.desired == "destroyed":
		s.mu.Unlock()
		toolboxError(w, r, http.StatusNotFound, fmt.Sprintf("sandbox %s not found", id))
		return
	case sb.state != "started":
		// The fake's choice: the sources do not pin the proxy's answer for
		// a sandbox that is not running.
		s.mu.Unlock()
		toolboxError(w, r, http.StatusBadRequest, fmt.Sprintf("sandbox %s is not started (state %s)", id, sb.state))
		return
	}
	s.touch(sb)
	env := s.baseEnv(sb)
	ver, _ := parseVersion(sb.daemon)
	if !ver.less(version{0, 167, 0}) {
		for _, k := range keys {
			env = append(env, k+"="+req.Envs[k])
		}
	}
	var cmd *exec.Cmd
	if ver.less(version{0, 156, 0}) {
		// Before v0.156.0 the daemon split the string and ran it with no
		// shell (and no process group).
		argv := splitCommand(req.Command)
		if len(argv) == 0 {
			s.mu.Unlock()
			toolboxError(w, r, http.StatusBadRequest, "empty command")
			return
		}
		cmd = exec.Command(argv[0], argv[1:]...)
	} else {
		cmd = exec.Command(s.shellLocked())
		cmd.Stdin = strings.NewReader(req.Command)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Dir = sb.home
	if req.Cwd != nil && *req.Cwd != "" {
		cmd.Dir = *req.Cwd
	}
	cmd.Env = env
	if s.knobs.ReplayExecute {
		s.startReplayed(sb, cmd, req.Command)
		// The replay comes once the first attempt's connection failed:
		// later than the first run's start.
		s.mu.Unlock()
		time.Sleep(replayGap)
		s.mu.Lock()
	}
	var out syncbuf.Buffer // the combined output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"exitCode": -1, "result": err.Error()})
		return
	}
	pgid := cmd.Process.Pid
	sb.procs[pgid] = true
	s.mu.Unlock()

	var timedOut atomic.Bool
	timeout := time.Duration(0)
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	} else if ver.less(version{0, 155, 0}) {
		timeout = 360 * time.Second // the old default
	}
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() {
			timedOut.Store(true)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		})
		defer t.Stop()
	}
	werr := cmd.Wait()
	s.mu.Lock()
	delete(sb.procs, pgid)
	s.mu.Unlock()
	if timedOut.Load() {
		toolboxError(w, r, http.StatusRequestTimeout, "command execution timeout")
		return
	}
	code := 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			writeJSON(w, http.StatusOK, map[string]any{"exitCode": -1, "result": out.String()})
			return
		}
		code = ee.ExitCode()
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": code, "result": out.String()})
}

// baseEnv is the environment of every process in sb: a minimal one of the
// host's PATH, the sandbox's HOME and TMPDIR, and the sandbox's env.
func (s *Server) baseEnv(sb *sandbox) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + sb.home, "TMPDIR=" + sb.tmp, "USER=daytona", "LANG=C.UTF-8",
	}
	for _, k := range sortedKeys(sb.env) {
		env = append(env, k+"="+sb.env[k])
	}
	return env
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// version is a parsed daemon version.
type version [3]int

func parseVersion(s string) (version, bool) {
	var v version
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return version{1 << 30}, false // unknown: the newest behaviour
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return version{1 << 30}, false
		}
		v[i] = n
	}
	return v, true
}

func (v version) less(w version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// splitCommand splits a command string as daemons before v0.156.0 did:
// on spaces, with single or double quotes grouping (the quotes removed, the
// other kind kept inside) and no escapes.
func splitCommand(command string) []string {
	var args []string
	var cur strings.Builder
	var quote rune
	for _, r := range command {
		switch {
		case quote == 0 && (r == '"' || r == '\''):
			quote = r
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && r == ' ':
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

// shellLocked is the shell a v0.156.0+ daemon runs commands with.
func (s *Server) shellLocked() string {
	if s.knobs.Shell != "" {
		return s.knobs.Shell
	}
	return "/bin/sh"
}

// replayGap is how long after the lost first attempt the proxy's replay
// starts the command again.
const replayGap = 50 * time.Millisecond

// startReplayed starts a copy of cmd whose answer is lost, as the first
// attempt of a request the proxy replays after a stale-connection error
// (the daemon does not end a command whose connection dropped, so both
// runs overlap). Guarded by s.mu.
func (s *Server) startReplayed(sb *sandbox, cmd *exec.Cmd, command string) {
	dup := exec.Command(cmd.Path, cmd.Args[1:]...)
	dup.Dir, dup.Env, dup.SysProcAttr = cmd.Dir, cmd.Env, &syscall.SysProcAttr{Setpgid: true}
	if cmd.Stdin != nil {
		dup.Stdin = strings.NewReader(command)
	}
	if dup.Start() != nil {
		return
	}
	pgid := dup.Process.Pid
	sb.procs[pgid] = true
	go func() {
		_ = dup.Wait()
		s.mu.Lock()
		delete(sb.procs, pgid)
		s.mu.Unlock()
	}()
}
