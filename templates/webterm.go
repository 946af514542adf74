package templates

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// terminalTokenTTL is how long a minted terminal token may be redeemed.
const terminalTokenTTL = 60 * time.Second

// defaultTerminalRing is the default size of a web terminal's output ring.
const defaultTerminalRing = 1 << 20

// MintTerminalToken mints a single-use token for the web terminal of
// session id (IMG-5) and returns it with the time it expires: random (32
// bytes), redeemable once within 60 seconds, bound to the session, to p
// and to the URL path the TerminalHandler serves it on. The token travels
// once, to the client; the store keeps only the SHA-256 of it with p and
// path (terminalToken.Hash). The session must be waiting for the operator
// and within its TTL and cap (one past its time is ended as timed_out:
// errcode.ErrConflict). p needs authz.ActionSetup.
func (s *Service) MintTerminalToken(ctx context.Context, p authz.Principal, id, path string) (token string, expiresAt time.Time, err error) {
	ses, err := s.loadSession(ctx, p, authz.ActionSetup, id)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := s.checkTime(ctx, p, ses, "terminal token"); err != nil {
		return "", time.Time{}, err
	}
	if ses.State != SessionWaiting {
		return "", time.Time{}, notWaiting(ses, fmt.Errorf("custom: terminal token for setup session %s: it is %s, not %s: %w", id, ses.State, SessionWaiting, errcode.ErrConflict))
	}
	if path == "" {
		return "", time.Time{}, fmt.Errorf("custom: terminal token for setup session %s: no URL path: %w", id, errcode.ErrInvalid)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, fmt.Errorf("custom: terminal token for setup session %s: %w", id, err)
	}
	tok := "bt_" + hex.EncodeToString(b)
	now := s.o.clock.Now().UTC()
	rec := &terminalToken{Hash: tokenHash(tok, p, path), Session: id, ExpiresAt: now.Add(terminalTokenTTL)}
	if err := s.src.Templates.InsertTerminalToken(ctx, rec); err != nil {
		return "", time.Time{}, fmt.Errorf("custom: terminal token for setup session %s: %w", id, err)
	}
	return tok, rec.ExpiresAt, nil
}

// tokenHash is the stored hash of token tok presented by p on path: the
// hex SHA-256 of all three, so a token presented by another principal (or
// with another role) or on another path hashes to no stored record and
// uses up nothing.
func tokenHash(tok string, p authz.Principal, path string) string {
	sum := sha256.Sum256([]byte("berth-terminal-token-v2\x00" + tok + "\x00" + p.ID + "\x00" + string(p.Role) + "\x00" + path))
	return hex.EncodeToString(sum[:])
}

// Control frames (JSON text frames). The server sends "attached" (or
// "reset") first, then output as binary frames, and "exit" when the shell
// ends; the client sends keystrokes as binary frames and "resize".
type controlFrame struct {
	Type string `json:"type"` // attached, reset, exit, resize, error
	// Process identifies the PTY (the "process" query parameter of a
	// reconnect).
	Process string `json:"process,omitempty"`
	// Offset is the byte offset of the output that follows.
	Offset int64  `json:"offset,omitempty"`
	Rows   int    `json:"rows,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Code   int    `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
}

// TerminalHandler returns the web terminal's http.Handler (IMG-5).
// principal returns the principal of a request (the host's
// authentication); it must equal the one the token was minted for.
// originPatterns are the allowed browser origins besides the request's own
// host (websocket.AcceptOptions.OriginPatterns; none: only the request's
// own host). A request carries ?token=T (browsers cannot set WebSocket
// headers), and for a reconnect &process=P&offset=N. The token is redeemed
// before the upgrade, and only when it was minted for the request's
// principal and path: an unknown, used or expired token, or one
// minted for another path or another principal, is refused with 401 and
// no upgrade, and is not used up by that refusal; one for a session that
// is not waiting any more or is past its TTL or cap (ended as timed_out
// there and then), or not the request's "session", is refused with 403 or
// 409; the token
// never appears in an answer or a log. Then the connection is upgraded
// with coder/websocket. Output and keystrokes travel in binary frames;
// resize, exit and reset are JSON text frames. Each PTY keeps a ring of
// its last MiB of output indexed by byte offset: a reconnect to the same process with offset N receives
// "attached" and exactly the bytes from N, or "reset" and the ring's tail
// when N is gone (never the whole ring blindly). The PTY lives in this
// process and belongs to the principal that opened it: a process unknown
// here (another replica's, or one that ended), or another principal's,
// gets a fresh shell and "reset".
func (s *Service) TerminalHandler(principal func(r *http.Request) (authz.Principal, error), originPatterns ...string) http.Handler {
	return &termHandler{s: s, principal: principal, origins: originPatterns, ring: defaultTerminalRing, procs: map[string]*termProc{}}
}

type termHandler struct {
	s         *Service
	principal func(r *http.Request) (authz.Principal, error)
	origins   []string
	ring      int // bytes of output kept per PTY (templatehook.SetTerminalRing)
	mu        sync.Mutex
	procs     map[string]*termProc
}

func (h *termHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if h.principal == nil {
		http.Error(w, "terminal handler has no principal resolver", http.StatusInternalServerError)
		return
	}
	p, err := h.principal(r)
	if err != nil {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return
	}
	q := r.URL.Query()
	tok := q.Get("token")
	if tok == "" {
		http.Error(w, "missing token", http.StatusUnauthorized)
		return
	}
	// The hash binds the token to this principal and this path: a token
	// presented by anyone else, or elsewhere, matches no record, is
	// refused and stays usable by its owner.
	rec, err := h.s.src.Templates.RedeemTerminalToken(ctx, tokenHash(tok, p, r.URL.Path), h.s.o.clock.Now())
	if err != nil {
		if errors.Is(err, errTokenInvalid) {
			http.Error(w, "terminal token invalid, used, expired, or not yours for this path", http.StatusUnauthorized)
		} else {
			http.Error(w, "terminal token could not be checked", http.StatusServiceUnavailable)
		}
		return
	}
	if s := q.Get("session"); s != "" && s != rec.Session {
		http.Error(w, "terminal token is for another session", http.StatusForbidden)
		return
	}
	ses, err := h.s.loadSession(ctx, p, authz.ActionSetup, rec.Session)
	if err != nil {
		http.Error(w, "setup session not found or not yours to drive", http.StatusForbidden)
		return
	}
	if err := h.s.checkTime(ctx, p, ses, "web terminal"); err != nil {
		http.Error(w, "setup session is past its time limit and timed out", http.StatusConflict)
		return
	}
	if ses.State != SessionWaiting {
		http.Error(w, "setup session is "+string(ses.State), http.StatusConflict)
		return
	}
	var offset int64
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			http.Error(w, "offset is not a byte offset", http.StatusBadRequest)
			return
		}
	}
	wantProc := q.Get("process")
	h.mu.Lock()
	proc := h.procs[wantProc]
	h.mu.Unlock()
	if proc != nil && (proc.session != ses.ID || proc.principal != p.ID || proc.role != p.Role || proc.ended()) {
		proc = nil
	}
	reset := wantProc != ""
	if proc == nil {
		if proc, err = h.open(ctx, p, ses.ID); err != nil {
			http.Error(w, "opening the terminal failed", http.StatusBadGateway)
			h.s.src.logger.Warn("custom: web terminal", "session", ses.ID, "err", err)
			return
		}
		offset = 0
	} else {
		reset = false
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: h.origins})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	h.serve(ctx, c, proc, offset, reset)
}

// open starts a PTY of session id in this process.
func (h *termHandler) open(ctx context.Context, p authz.Principal, id string) (*termProc, error) {
	ts, err := h.s.OpenTerminal(context.WithoutCancel(ctx), p, id, 24, 80)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	proc := &termProc{id: "prc_" + hex.EncodeToString(b), session: id, principal: p.ID, role: p.Role, ts: ts, ring: make([]byte, h.ring), done: make(chan struct{})}
	proc.cond = sync.NewCond(&proc.mu)
	h.mu.Lock()
	h.procs[proc.id] = proc
	h.mu.Unlock()
	go proc.pump(func() {
		h.mu.Lock()
		delete(h.procs, proc.id)
		h.mu.Unlock()
	})
	return proc, nil
}

// serve runs one connection: output from offset (after "attached" or
// "reset"), input and resizes to the PTY.
func (h *termHandler) serve(ctx context.Context, c *websocket.Conn, proc *termProc, offset int64, reset bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start, ok := proc.clamp(offset)
	typ := "attached"
	if reset || !ok {
		typ = "reset"
	}
	if err := writeControl(ctx, c, controlFrame{Type: typ, Process: proc.id, Offset: start}); err != nil {
		return
	}
	go func() { // input
		defer cancel()
		for {
			mt, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			if mt == websocket.MessageBinary {
				if _, err := proc.ts.Write(data); err != nil {
					return
				}
				continue
			}
			var f controlFrame
			if json.Unmarshal(data, &f) == nil && f.Type == "resize" && f.Rows > 0 && f.Cols > 0 {
				_ = proc.ts.Resize(ctx, f.Rows, f.Cols)
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		proc.mu.Lock()
		proc.cond.Broadcast()
		proc.mu.Unlock()
	})
	defer stop()
	pos := start
	for {
		chunk, next, gone, exited := proc.next(ctx, pos)
		if ctx.Err() != nil {
			return
		}
		if gone { // the reader fell behind the ring
			pos = next
			if writeControl(ctx, c, controlFrame{Type: "reset", Process: proc.id, Offset: pos}) != nil {
				return
			}
			continue
		}
		if len(chunk) > 0 {
			if c.Write(ctx, websocket.MessageBinary, chunk) != nil {
				return
			}
			pos = next
			continue
		}
		if exited {
			_ = writeControl(ctx, c, controlFrame{Type: "exit", Process: proc.id, Offset: pos, Code: proc.code})
			c.Close(websocket.StatusNormalClosure, "exit")
			return
		}
	}
}

func writeControl(ctx context.Context, c *websocket.Conn, f controlFrame) error {
	b, _ := json.Marshal(f)
	return c.Write(ctx, websocket.MessageText, b)
}

// termProc is a PTY of this process and the ring of its output: ring
// holds the bytes [total-len, total) at positions offset % len(ring).
type termProc struct {
	id, session string
	// principal and role opened the PTY: only they reconnect to it.
	principal string
	role      authz.Role
	ts        drivers.TerminalSession
	mu        sync.Mutex
	cond      *sync.Cond
	ring      []byte
	total     int64
	exited    bool
	code      int
	done      chan struct{}
}

func (t *termProc) ended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exited
}

// pump copies the PTY's output into the ring until it ends.
func (t *termProc) pump(gone func()) {
	buf := make([]byte, 32<<10)
	for {
		n, err := t.ts.Read(buf)
		if n > 0 {
			t.mu.Lock()
			b := buf[:n]
			if len(b) > len(t.ring) {
				t.total += int64(len(b) - len(t.ring))
				b = b[len(b)-len(t.ring):]
			}
			for len(b) > 0 {
				i := int(t.total % int64(len(t.ring)))
				k := copy(t.ring[i:], b)
				b = b[k:]
				t.total += int64(k)
			}
			t.cond.Broadcast()
			t.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	code := -1
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if res, err := t.ts.Wait(ctx); err == nil && res != nil {
		code = res.ExitCode
	}
	cancel()
	_ = t.ts.Close()
	t.mu.Lock()
	t.exited, t.code = true, code
	t.cond.Broadcast()
	t.mu.Unlock()
	close(t.done)
	gone()
}

// clamp returns where a reader asking for offset starts, and whether it
// is exactly offset.
func (t *termProc) clamp(offset int64) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first := max(0, t.total-int64(len(t.ring)))
	if offset < first || offset > t.total {
		return first, false
	}
	return offset, true
}

// next waits for output at pos and returns a copy of what is there (up to
// 32 KiB) and the next position; gone when pos left the ring (next is the
// ring's start); exited when the PTY ended and nothing is left.
func (t *termProc) next(ctx context.Context, pos int64) (chunk []byte, next int64, gone, exited bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pos == t.total && !t.exited && ctx.Err() == nil {
		t.cond.Wait()
	}
	first := max(0, t.total-int64(len(t.ring)))
	if pos < first {
		return nil, first, true, false
	}
	n := min(t.total-pos, 32<<10)
	if n == 0 {
		return nil, pos, false, t.exited
	}
	out := make([]byte, 0, n)
	for k := pos; k < pos+n; {
		i := int(k % int64(len(t.ring)))
		end := min(len(t.ring), i+int(pos+n-k))
		out = append(out, t.ring[i:end]...)
		k += int64(end - i)
	}
	return out, pos + n, false, false
}

var _ io.Writer = (*sessionTerminal)(nil)
