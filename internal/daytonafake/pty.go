package daytonafake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"
)

// Routes of the toolbox's PTY sessions.
const (
	RouteCreatePty  = "POST /toolbox/{sandboxId}/process/pty"
	RouteGetPty     = "GET /toolbox/{sandboxId}/process/pty/{sessionId}"
	RouteDeletePty  = "DELETE /toolbox/{sandboxId}/process/pty/{sessionId}"
	RouteResizePty  = "POST /toolbox/{sandboxId}/process/pty/{sessionId}/resize"
	RouteConnectPty = "GET /toolbox/{sandboxId}/process/pty/{sessionId}/connect"
)

// ptySession is one PTY: the sandbox user's login shell (/bin/sh -i -l) on
// a real pseudo-terminal of this host, as the daemon runs it.
type ptySession struct {
	id, cwd    string
	envs       map[string]string
	cols, rows uint16
	created    time.Time
	ptmx       *os.File
	fd         int // ptmx's descriptor, valid until ptmxClosed
	cmd        *exec.Cmd

	mu         sync.Mutex
	clients    map[chan []byte]bool // output to each attached client
	exited     chan struct{}
	exitCode   int
	ptmxClosed bool
}

// openPTY allocates a pseudo-terminal pair.
func openPTY() (ptmx, tty *os.File, err error) {
	ptmx, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(ptmx.Fd())
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)
	}
	if err == nil {
		tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	}
	if err != nil {
		ptmx.Close()
		return nil, nil, err
	}
	return ptmx, tty, nil
}

var errPtyEnded = errors.New("PTY session has ended")

// resize sets the window size; errPtyEnded once the terminal is closed.
func (p *ptySession) resize(cols, rows uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ptmxClosed {
		return errPtyEnded
	}
	p.cols, p.rows = cols, rows
	return unix.IoctlSetWinsize(p.fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}

// pump copies the terminal's output to every attached client until the
// shell ends, then records its exit code.
func (p *ptySession) pump() {
	buf := make([]byte, 32<<10)
	for {
		n, err := p.ptmx.Read(buf)
		if n > 0 {
			b := append([]byte(nil), buf[:n]...)
			// Broadcast to the clients attached now; with none, the output
			// is lost (websocket.go broadcast; nothing is replayed).
			p.mu.Lock()
			for c := range p.clients {
				select {
				case c <- b:
				default: // a slow client loses output, as with the daemon
				}
			}
			p.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	err := p.cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	p.mu.Lock()
	p.exitCode = code
	p.ptmxClosed = true
	p.ptmx.Close()
	p.mu.Unlock()
	close(p.exited)
}

func (p *ptySession) kill() {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (p *ptySession) info() map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	active := true
	select {
	case <-p.exited:
		active = false
	default:
	}
	return map[string]any{
		"id": p.id, "cwd": p.cwd, "envs": p.envs, "cols": p.cols, "rows": p.rows,
		"createdAt": p.created.UTC().Format(time.RFC3339Nano), "active": active, "lazyStart": false,
	}
}

// toolboxSandbox finds the started sandbox of a toolbox route; nil after
// an error answer.
func (s *Server) toolboxSandbox(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("sandboxId")
	sb := s.sandboxes[id]
	if sb != nil {
		s.advance(sb, false)
	}
	switch {
	case sb == nil || sb.state == "destroyed" || sb.desired == "destroyed":
		toolboxError(w, r, http.StatusNotFound, fmt.Sprintf("sandbox %s not found", id))
		return nil
	case sb.state != "started":
		toolboxError(w, r, http.StatusBadRequest, fmt.Sprintf("sandbox %s is not started (state %s)", id, sb.state))
		return nil
	}
	s.touch(sb)
	return sb
}

func (s *Server) createPty(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID        string            `json:"id"`
		Cwd       string            `json:"cwd"`
		Envs      map[string]string `json:"envs"`
		Cols      uint16            `json:"cols"`
		Rows      uint16            `json:"rows"`
		LazyStart bool              `json:"lazyStart"`
	}
	if err := decodeStrict(r, &req); err != nil {
		ptyError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case req.ID == "":
		ptyError(w, http.StatusBadRequest, "session ID is required")
		return
	case req.Cols > 1000:
		ptyError(w, http.StatusBadRequest, "invalid value for cols - must be less than 1000")
		return
	case req.Rows > 1000:
		ptyError(w, http.StatusBadRequest, "invalid value for rows - must be less than 1000")
		return
	}
	if req.Cols == 0 {
		req.Cols = 80
	}
	if req.Rows == 0 {
		req.Rows = 24
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.toolboxSandbox(w, r)
	if sb == nil {
		return
	}
	if _, dup := sb.ptys[req.ID]; dup {
		ptyError(w, http.StatusConflict, fmt.Sprintf("PTY session with ID '%s' already exists", req.ID))
		return
	}
	ptmx, tty, err := openPTY()
	if err != nil {
		ptyError(w, http.StatusInternalServerError, "failed to start PTY session: "+err.Error())
		return
	}
	defer tty.Close()
	cwd := req.Cwd
	if cwd == "" {
		cwd = sb.home
	}
	p := &ptySession{id: req.ID, cwd: cwd, envs: orEmpty(req.Envs), created: s.clk.Now(), ptmx: ptmx,
		fd: int(ptmx.Fd()), exited: make(chan struct{})}
	if err := p.resize(req.Cols, req.Rows); err != nil {
		ptmx.Close()
		ptyError(w, http.StatusInternalServerError, "failed to start PTY session: "+err.Error())
		return
	}
	cmd := exec.Command("/bin/sh", "-i", "-l")
	cmd.Dir = cwd
	cmd.Env = append(s.baseEnv(sb), "TERM=xterm-256color")
	for _, k := range sortedKeys(p.envs) {
		cmd.Env = append(cmd.Env, k+"="+p.envs[k])
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		ptmx.Close()
		ptyError(w, http.StatusInternalServerError, "failed to start PTY session: "+err.Error())
		return
	}
	p.cmd = cmd
	sb.ptys[req.ID] = p
	go p.pump()
	writeJSON(w, http.StatusCreated, map[string]any{"sessionId": req.ID})
}

// pty finds the PTY session of a route; nil after an error answer.
func (s *Server) pty(w http.ResponseWriter, r *http.Request) *ptySession {
	sb := s.toolboxSandbox(w, r)
	if sb == nil {
		return nil
	}
	p := sb.ptys[r.PathValue("sessionId")]
	if p == nil {
		ptyError(w, http.StatusNotFound, "PTY session not found")
	}
	return p
}

func (s *Server) getPty(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pty(w, r); p != nil {
		writeJSON(w, http.StatusOK, p.info())
	}
}

func (s *Server) deletePty(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pty(w, r); p != nil {
		p.kill()
		delete(s.sandboxes[r.PathValue("sandboxId")].ptys, p.id)
		writeJSON(w, http.StatusOK, map[string]any{"message": "PTY session deleted"})
	}
}

func (s *Server) resizePty(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Cols uint16 `json:"cols"`
		Rows uint16 `json:"rows"`
	}
	if err := decodeStrict(r, &req); err != nil {
		ptyError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Cols > 1000 || req.Rows > 1000 || req.Cols == 0 || req.Rows == 0 {
		ptyError(w, http.StatusBadRequest, "cols and rows must be between 1 and 1000")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pty(w, r)
	if p == nil {
		return
	}
	if err := p.resize(req.Cols, req.Rows); errors.Is(err, errPtyEnded) {
		ptyError(w, http.StatusGone, err.Error())
		return
	} else if err != nil {
		ptyError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, p.info())
}

// ptyReadLimit is the daemon's WebSocket read limit for PTY input.
const ptyReadLimit = 64 << 10

// ptyError writes the PTY routes' error body, {"error": msg}
// (apps/daemon/pkg/toolbox/process/pty/controller.go), unlike the rest of
// the toolbox.
func ptyError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg})
}

// connectPty attaches a WebSocket client (several may attach to one
// session; each gets the output produced while it is attached, nothing
// from before): a text control message
// {"type":"control","status":"connected"}, then the terminal's output as
// binary messages and the client's messages as input; when the shell ends
// the connection closes with 1000 (exit 0) or 1011, and the reason
// {"exitCode":N,"exitReason":...}, as the daemon does.
func (s *Server) connectPty(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	p := s.pty(w, r)
	s.mu.Unlock()
	if p == nil {
		return
	}
	out := make(chan []byte, 256)
	p.mu.Lock()
	if p.clients == nil {
		p.clients = map[chan []byte]bool{}
	}
	p.clients[out] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.clients, out)
		p.mu.Unlock()
	}()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	// The daemon's read limit (pty/types.go readLimit): a larger input
	// message ends the connection.
	conn.SetReadLimit(ptyReadLimit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = conn.Write(ctx, websocket.MessageText, []byte(`{"type":"control","status":"connected"}`))
	go func() { // client -> terminal
		defer cancel()
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if _, err := p.ptmx.Write(data); err != nil {
				return
			}
		}
	}()
	for {
		select {
		case b := <-out:
			if conn.Write(ctx, websocket.MessageBinary, b) != nil {
				return
			}
		case <-p.exited:
			for drained := false; !drained; {
				select {
				case b := <-out:
					_ = conn.Write(ctx, websocket.MessageBinary, b)
				default:
					drained = true
				}
			}
			p.mu.Lock()
			code := p.exitCode
			p.mu.Unlock()
			status := websocket.StatusNormalClosure
			reason := map[string]any{"exitCode": code}
			if code != 0 {
				status = websocket.StatusInternalError
				reason["exitReason"] = "non-zero exit"
			}
			raw, _ := json.Marshal(reason)
			_ = conn.Close(status, string(raw))
			return
		case <-ctx.Done():
			return
		}
	}
}
