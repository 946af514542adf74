package templates

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
)

// terminals are the PTYs this process opened, by session: a capture or an
// end of the session closes them.
type terminals struct {
	mu   sync.Mutex
	open map[string]map[*sessionTerminal]struct{}
}

func newTerminals() *terminals {
	return &terminals{open: map[string]map[*sessionTerminal]struct{}{}}
}

func (t *terminals) add(id string, st *sessionTerminal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open[id] == nil {
		t.open[id] = map[*sessionTerminal]struct{}{}
	}
	t.open[id][st] = struct{}{}
}

func (t *terminals) remove(id string, st *sessionTerminal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.open[id], st)
	if len(t.open[id]) == 0 {
		delete(t.open, id)
	}
}

func (t *terminals) closeSession(id string) {
	t.mu.Lock()
	list := t.open[id]
	delete(t.open, id)
	t.mu.Unlock()
	for st := range list {
		_ = st.TerminalSession.Close()
	}
}

// sessionTerminal is a PTY of a setup sandbox: input pushes the session's
// TTL back (at most once per tenth of the TTL); input after the session's
// cap closes it.
type sessionTerminal struct {
	drivers.TerminalSession
	s        *Service
	p        authz.Principal
	id       string
	ttl      time.Duration
	deadline time.Time
	mu       sync.Mutex
	last     time.Time
	once     sync.Once
}

func (t *sessionTerminal) Write(b []byte) (int, error) {
	if !t.s.o.clock.Now().Before(t.deadline) {
		_ = t.Close()
		return 0, fmt.Errorf("custom: terminal of setup session %s: the session is past its cap: %w", t.id, errcode.ErrConflict)
	}
	n, err := t.TerminalSession.Write(b)
	t.mu.Lock()
	now := t.s.o.clock.Now()
	due := now.Sub(t.last) >= t.ttl/10
	if due {
		t.last = now
	}
	t.mu.Unlock()
	if due {
		if ses, gerr := t.s.src.Templates.GetSession(context.Background(), t.id); gerr == nil {
			t.s.touch(context.Background(), ses)
		}
	}
	return n, err
}

func (t *sessionTerminal) Close() error {
	t.once.Do(func() { t.s.terms.remove(t.id, t) })
	return t.TerminalSession.Close()
}

// OpenTerminal opens an interactive terminal (a PTY running the sandbox's
// login shell) in the setup sandbox of session id, which must be waiting
// for the operator and within its TTL and cap (else an error wrapping
// errcode.ErrConflict; one past its time is ended as timed_out); a driver without
// the terminal capability is refused naming it (drivers.ErrUnsupported,
// IMG-7). The PTY lives in this process; input extends the session's TTL
// up to its cap, and input past the cap closes it; capturing or ending the
// session closes it. The caller closes it too. rows and cols are its
// window size (0, either: the driver's default); Resize changes it. p
// needs authz.ActionSetup.
func (s *Service) OpenTerminal(ctx context.Context, p authz.Principal, id string, rows, cols int) (drivers.TerminalSession, error) {
	ses, err := s.loadSession(ctx, p, authz.ActionSetup, id)
	if err != nil {
		return nil, err
	}
	if err := s.checkTime(ctx, p, ses, "terminal"); err != nil {
		return nil, err
	}
	if ses.State != SessionWaiting {
		return nil, notWaiting(ses, fmt.Errorf("custom: terminal of setup session %s: it is %s, not %s: %w", id, ses.State, SessionWaiting, errcode.ErrConflict))
	}
	d, err := s.src.Drivers.Lookup(ses.Driver)
	if err != nil {
		return nil, fmt.Errorf("custom: terminal of setup session %s: %w", id, err)
	}
	if !drivers.Effective(d, 0).Has(drivers.CapTerminal) {
		return nil, &errcode.Error{Message: fmt.Sprintf("Cannot open a terminal in setup session %s: its driver %s lacks the capability %s.", id, d.Name(), drivers.CapTerminal),
			Err: fmt.Errorf("custom: terminal of setup session %s: driver %q lacks capability %s: %w", id, d.Name(), drivers.CapTerminal, drivers.ErrUnsupported)}
	}
	h, err := s.src.Leases.Open(ctx, p, ses.Lease)
	if err != nil {
		return nil, fmt.Errorf("custom: terminal of setup session %s: %w", id, err)
	}
	ts, err := leasehook.OpenTerminal(h, ctx, drivers.TerminalRequest{Rows: rows, Cols: cols})
	if err != nil {
		err = fmt.Errorf("custom: terminal of setup session %s: %w", id, err)
		if env, d, eerr := s.environment(ctx, ses.Environment); eerr == nil {
			// A provider's error may echo a credential.
			err = &redactedError{msg: redact(err.Error(), s.secretValues(ctx, env, d)), cause: err}
		}
		return nil, err
	}
	st := &sessionTerminal{TerminalSession: ts, s: s, p: p, id: id, ttl: s.ttl(ses), deadline: ses.Deadline, last: s.o.clock.Now()}
	s.terms.add(id, st)
	s.touch(ctx, ses)
	return st, nil
}

// notWaiting is the refusal of a terminal (or of its token) in setup
// session ses, which is not waiting for the operator; err is the chain.
func notWaiting(ses *Session, err error) error {
	what := "setup session " + ses.ID
	if ses.Name != "" {
		what = fmt.Sprintf("setup session %q", ses.Name)
	}
	return &errcode.Error{Reason: "setup_session_not_waiting",
		Message: fmt.Sprintf("Cannot open a terminal in %s: its sandbox is %s, not waiting for you; start a new interactive setup.", what, ses.State),
		Err:     err}
}
