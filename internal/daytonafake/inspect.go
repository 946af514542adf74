package daytonafake

import (
	"maps"
	"time"
)

// SandboxView is a sandbox as the fake holds it, for test assertions.
type SandboxView struct {
	ID, Name, Snapshot  string
	State, DesiredState string
	Pending             bool
	ErrorReason         string
	Labels, Env         map[string]string
	AutoDeleteInterval  int64
	Home                string // the sandbox's home directory on this host
	Running             int    // commands the toolbox is running
}

func (s *Server) view(sb *sandbox) SandboxView {
	return SandboxView{
		ID: sb.id, Name: sb.name, Snapshot: sb.snapshot, State: sb.state, DesiredState: sb.desired,
		Pending: sb.pending, ErrorReason: sb.errorReason, Labels: maps.Clone(sb.labels), Env: maps.Clone(sb.env),
		AutoDeleteInterval: sb.autoDelete, Home: sb.home, Running: len(sb.procs),
	}
}

// Sandbox returns sandbox id as the fake holds it, destroyed ones included;
// reading does not count as a poll. It finishes a transition that is due.
func (s *Server) Sandbox(id string) (SandboxView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return SandboxView{}, false
	}
	s.advance(sb, false)
	return s.view(sb), true
}

// Sandboxes returns every sandbox that is not destroyed.
func (s *Server) Sandboxes() []SandboxView {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SandboxView
	for _, sb := range s.sandboxes {
		s.advance(sb, false)
		if sb.state != "destroyed" {
			out = append(out, s.view(sb))
		}
	}
	return out
}

// Advance moves a fake clock (a *clock.Fake given in Options.Clock) by d
// and finishes every transition that is due. It panics when the server
// runs on another clock.
func (s *Server) Advance(d time.Duration) {
	f, ok := s.clk.(interface{ Advance(time.Duration) })
	if !ok {
		panic("daytonatest: Advance needs a fake clock in Options.Clock")
	}
	f.Advance(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sb := range s.sandboxes {
		s.advance(sb, false)
	}
	s.gcSnapshots()
}
