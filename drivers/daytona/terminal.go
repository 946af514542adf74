package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
)

// apiPtyCreate is the toolbox's PtyCreateRequest.
type apiPtyCreate struct {
	ID   string            `json:"id"`
	Cwd  string            `json:"cwd,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cols uint16            `json:"cols,omitempty"`
	Rows uint16            `json:"rows,omitempty"`
}

// apiPtyResize is the toolbox's PtyResizeRequest.
type apiPtyResize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// apiPtyExit is the reason of the close frame that ends a PTY connection.
type apiPtyExit struct {
	ExitCode   *int    `json:"exitCode"`
	ExitReason *string `json:"exitReason"`
}

// maxDim is the largest terminal width or height the daemon accepts
// (v0.190.0 apps/daemon/pkg/toolbox/process/pty/controller.go and
// session.go refuse more than 1000).
const maxDim = 1000

func clampDim(n, def int) uint16 {
	switch {
	case n <= 0:
		return uint16(def)
	case n > maxDim:
		return maxDim
	}
	return uint16(n)
}

// maxTerminalBuffer bounds the terminal output held for a reader that is
// behind; older output beyond it is dropped.
const maxTerminalBuffer = 1 << 20

// maxInputMessage bounds one WebSocket message of terminal input: the
// daemon's read limit is 64 KiB (pty/types.go readLimit), and a larger
// message ends the connection.
const maxInputMessage = 32 << 10

// OpenTerminal opens a PTY session in the sandbox through the toolbox
// (POST /process/pty, then the WebSocket /process/pty/{id}/connect). The
// toolbox starts the sandbox user's login shell; when req.Argv is set, the
// driver types "exec <argv>" into it as the first input, so the terminal's
// output starts with that line. req.Env and req.Term (default
// xterm-256color) are the session's envs, req.Dir its cwd. ctx bounds the
// opening only; Close ends the session and its processes.
//
// The daemon sends output only to the clients attached when it is produced
// and replays nothing, so output of the shell before the attachment (its
// first prompt) may be missing; the session is attached before any input
// is sent. Other clients may attach to the same session; each sees the
// output from its attachment on. Widths and heights are capped at 1000,
// input is sent in messages under the daemon's 64 KiB limit.
func (sb *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	if err := sb.live(); err != nil {
		return nil, err
	}
	c := sb.s.c
	tb, err := sb.toolboxURL(ctx)
	if err != nil {
		return nil, fmt.Errorf("daytona: terminal in sandbox %s: %w", sb.id, err)
	}
	if err := sb.configEnvAllowed(); err != nil {
		return nil, fmt.Errorf("daytona: terminal in sandbox %s: %w", sb.id, err)
	}
	envs := maps.Clone(commandEnvs(sb.s.env, req.Env))
	if envs == nil {
		envs = map[string]string{}
	}
	envs["TERM"] = req.Term
	if req.Term == "" {
		envs["TERM"] = "xterm-256color"
	}
	id := "berth-" + newToken()[:16]
	create := apiPtyCreate{ID: id, Cwd: req.Dir, Envs: envs, Cols: clampDim(req.Cols, 80), Rows: clampDim(req.Rows, 24)}
	if err := c.send(ctx, tb, http.MethodPost, "process/pty", nil, create, nil); err != nil {
		return nil, fmt.Errorf("daytona: terminal in sandbox %s: %w", sb.id, err)
	}
	ts := &terminal{sb: sb, tb: tb, id: id, done: make(chan struct{})}
	ts.out.cond = sync.NewCond(&ts.out.mu)
	ws := *tb.JoinPath("process", "pty", id, "connect")
	ws.Scheme = map[string]string{"http": "ws", "https": "wss"}[tb.Scheme]
	hdr := http.Header{"Authorization": {"Bearer " + c.key}}
	if c.org != "" {
		hdr.Set("X-Daytona-Organization-ID", c.org)
	}
	conn, resp, err := websocket.Dial(ctx, ws.String(), &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr})
	if err != nil {
		ts.deleteSession()
		status := ""
		if resp != nil {
			status = ": " + resp.Status
			if k := statusKind(resp.StatusCode); k != nil {
				return nil, fmt.Errorf("daytona: terminal %s in sandbox %s at %s%s: %w", id, sb.id, tb.Host, status, k)
			}
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("daytona: terminal %s in sandbox %s: %w", id, sb.id, cerr)
		}
		return nil, fmt.Errorf("daytona: terminal %s in sandbox %s at %s%s: %s", id, sb.id, tb.Host, status, c.scrub(err.Error()))
	}
	conn.SetReadLimit(1 << 20)
	ts.conn = conn
	// The toolbox confirms the attachment with a control message.
	typ, first, err := conn.Read(ctx)
	if err != nil || typ != websocket.MessageText || !isControl(first, "connected") {
		ts.Close()
		return nil, fmt.Errorf("daytona: terminal %s in sandbox %s: no connected message (%v)", id, sb.id, err)
	}
	go ts.readLoop()
	if len(req.Argv) > 0 {
		quoted := ""
		for _, a := range req.Argv {
			quoted += " " + shellQuote(a)
		}
		if _, err := io.WriteString(ts, "exec"+quoted+"\n"); err != nil {
			ts.Close()
			return nil, err
		}
	}
	return ts, nil
}

func isControl(msg []byte, status string) bool {
	var m struct{ Type, Status string }
	return json.Unmarshal(msg, &m) == nil && m.Type == "control" && (status == "" || m.Status == status)
}

// terminal is a live PTY session.
type terminal struct {
	sb   *sandbox
	tb   *url.URL
	id   string
	conn *websocket.Conn

	out struct {
		mu     sync.Mutex
		cond   *sync.Cond
		buf    []byte
		closed bool
	}
	done      chan struct{}
	res       *drivers.Result
	waitErr   error
	closeOnce sync.Once
}

var _ drivers.TerminalSession = (*terminal)(nil)

// readLoop moves the terminal's output into the read buffer until the
// connection ends, and reads the exit code from the close frame.
func (t *terminal) readLoop() {
	defer close(t.done)
	for {
		typ, data, err := t.conn.Read(context.Background())
		if err != nil {
			var ce websocket.CloseError
			var exit apiPtyExit
			if errors.As(err, &ce) && json.Unmarshal([]byte(ce.Reason), &exit) == nil && exit.ExitCode != nil {
				t.res = &drivers.Result{ExitCode: *exit.ExitCode}
			} else if errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure {
				t.res = &drivers.Result{}
			} else {
				t.waitErr = fmt.Errorf("daytona: terminal %s in sandbox %s: connection ended without an exit status: %v", t.id, t.sb.id, err)
			}
			t.closeOut()
			return
		}
		if typ == websocket.MessageText && isControl(data, "") {
			continue
		}
		t.out.mu.Lock()
		t.out.buf = append(t.out.buf, data...)
		if over := len(t.out.buf) - maxTerminalBuffer; over > 0 {
			// Bounded: a reader that fell this far behind loses the
			// oldest output, as the daemon drops output for slow clients.
			t.out.buf = append(t.out.buf[:0], t.out.buf[over:]...)
		}
		t.out.cond.Broadcast()
		t.out.mu.Unlock()
	}
}

func (t *terminal) closeOut() {
	t.out.mu.Lock()
	t.out.closed = true
	t.out.cond.Broadcast()
	t.out.mu.Unlock()
}

// Read returns the terminal's output; io.EOF after the session ended and
// its output was read. At most maxTerminalBuffer (1 MiB) of unread output
// is held: a reader further behind loses the oldest.
func (t *terminal) Read(p []byte) (int, error) {
	t.out.mu.Lock()
	defer t.out.mu.Unlock()
	for len(t.out.buf) == 0 && !t.out.closed {
		t.out.cond.Wait()
	}
	if len(t.out.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, t.out.buf)
	t.out.buf = t.out.buf[n:]
	return n, nil
}

// Write sends keystrokes, in messages of at most maxInputMessage bytes.
func (t *terminal) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		chunk := p[n:min(len(p), n+maxInputMessage)]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := t.conn.Write(ctx, websocket.MessageBinary, chunk)
		cancel()
		if err != nil {
			return n, fmt.Errorf("daytona: terminal %s in sandbox %s: %w", t.id, t.sb.id, err)
		}
		n += len(chunk)
	}
	return n, nil
}

// Resize changes the window size (POST /process/pty/{id}/resize).
func (t *terminal) Resize(ctx context.Context, rows, cols int) error {
	req := apiPtyResize{Cols: clampDim(cols, 80), Rows: clampDim(rows, 24)}
	if err := t.sb.s.c.send(ctx, t.tb, http.MethodPost, "process/pty/"+url.PathEscape(t.id)+"/resize", nil, req, nil); err != nil {
		return fmt.Errorf("daytona: terminal %s in sandbox %s: %w", t.id, t.sb.id, err)
	}
	return nil
}

// Wait blocks until the shell ends and returns its exit code, as the
// toolbox reported it in the connection's close frame. If ctx ends first it
// returns an error wrapping ctx.Err() and the session stays open.
func (t *terminal) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, t.done); err != nil {
		return nil, fmt.Errorf("daytona: terminal %s in sandbox %s: wait: %w", t.id, t.sb.id, err)
	}
	return t.res, t.waitErr
}

// Close ends the connection and deletes the session, which ends its
// processes. It is safe to call more than once.
func (t *terminal) Close() error {
	t.closeOnce.Do(func() {
		if t.conn != nil {
			_ = t.conn.Close(websocket.StatusNormalClosure, "")
		}
		t.deleteSession()
		t.closeOut()
	})
	return nil
}

func (t *terminal) deleteSession() {
	ctx, cancel := context.WithTimeout(context.Background(), t.sb.d.opts.CleanupTimeout)
	defer cancel()
	err := t.sb.s.c.send(ctx, t.tb, http.MethodDelete, "process/pty/"+url.PathEscape(t.id), nil, nil, nil)
	if err != nil && !errors.Is(err, errcode.ErrNotFound) {
		t.sb.d.opts.Logger.Warn("daytona: deleting a terminal session failed", "sandbox", t.sb.id, "session", t.id, "err", err)
	}
}
