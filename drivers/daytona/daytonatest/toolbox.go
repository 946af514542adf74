package daytonatest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
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

// execute is the toolbox's POST /process/execute, run for real: the command
// is fed to /bin/sh on stdin, as the daemon does, in its own process group,
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
	env := s.baseEnv(sb)
	for _, k := range keys {
		env = append(env, k+"="+req.Envs[k])
	}
	cmd := exec.Command("/bin/sh")
	cmd.Stdin = strings.NewReader(req.Command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Dir = sb.home
	if req.Cwd != nil && *req.Cwd != "" {
		cmd.Dir = *req.Cwd
	}
	cmd.Env = env
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
	if req.Timeout != nil && *req.Timeout > 0 {
		t := time.AfterFunc(time.Duration(*req.Timeout)*time.Second, func() {
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
