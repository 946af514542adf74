// Package daytonatest is a fake Daytona API for tests of hosts that use the
// daytona driver: an httptest server on 127.0.0.1 that keeps the real API's
// rules (409 while a state change is pending, soft delete then 404, 408 on
// an exec timeout, the snapshot name rules, a create that answers before the
// sandbox is started) and runs the sandboxes' commands on this host.
//
//	srv, err := daytonatest.New(nil)
//	defer srv.Close()
//	snap, err := srv.CreateSnapshot("base:1.0", "debian:12.7")
//	cfg := map[string]any{daytona.FieldAPIURL: srv.URL(),
//		daytona.FieldAPIKey: srv.APIKey(), daytona.FieldSnapshotID: snap.ID}
//	// ... acquire and release through berth, then:
//	left := srv.Sandboxes() // none once every lease is released
//
// New makes a server; Sandboxes, LookupSnapshot and Calls read back what the
// driver did. The daytona driver's own tests use the whole fake, with its
// fault injection, timing knobs and fake clock, which is internal to the
// driver.
package daytonatest

import "github.com/berthdev/berth/drivers/daytona/internal/fakeapi"

// Routes that Calls takes, as Go ServeMux patterns.
const (
	// RouteHealth is the API's health check, which the driver's
	// CheckHealth calls.
	RouteHealth = fakeapi.RouteHealth
	// RouteCreateSandbox creates a sandbox, once per Acquire that allocates.
	RouteCreateSandbox = fakeapi.RouteCreateSandbox
)

// Options configure a server. A nil *Options means defaults.
type Options struct {
	// APIKey is the only bearer token accepted; default "daytonatest-key".
	APIKey string
}

// Server is a running fake Daytona API. Its methods are safe for concurrent
// use.
type Server struct {
	s *fakeapi.Server
}

// New starts a server on 127.0.0.1 with no sandboxes and no snapshots; its
// organization is a random UUID and it runs on the wall clock. Close it.
func New(opts *Options) (*Server, error) {
	var o fakeapi.Options
	if opts != nil {
		o.APIKey = opts.APIKey
	}
	s, err := fakeapi.New(&o)
	if err != nil {
		return nil, err
	}
	return &Server{s: s}, nil
}

// URL returns the API base URL, http://127.0.0.1:PORT/api: the driver's
// api_url.
func (s *Server) URL() string { return s.s.URL() }

// APIKey returns the accepted API key: the driver's api_key.
func (s *Server) APIKey() string { return s.s.APIKey() }

// OrganizationID returns the key's organization: the driver's
// organization_id (the API, and so the fake, ignores it for an API key).
func (s *Server) OrganizationID() string { return s.s.OrganizationID() }

// Close kills every process the sandboxes run, stops the server and removes
// the sandboxes' directories.
func (s *Server) Close() { s.s.Close() }

// Calls returns how many requests reached route (a Route constant) after
// authentication.
func (s *Server) Calls(route string) int { return s.s.Calls(route) }

// Snapshot is a snapshot as the server holds it.
type Snapshot struct {
	// ID is the snapshot's UUID: the driver's snapshot_id.
	ID string
	// Name is the snapshot's unique name.
	Name string
	// State is the API's state: "pending", "active", "inactive",
	// "removing", ...
	State string
}

// CreateSnapshot adds an active snapshot named name for image imageName,
// with the API's rules (imageName needs a tag or digest and not ":latest";
// names are unique). Its id is a new UUID.
func (s *Server) CreateSnapshot(name, imageName string) (Snapshot, error) {
	sn, err := s.s.CreateSnapshot(name, imageName)
	return Snapshot{ID: sn.ID, Name: sn.Name, State: sn.State}, err
}

// LookupSnapshot returns the snapshot with id (never by name), and false
// when there is none (deleted ones are gone).
func (s *Server) LookupSnapshot(id string) (Snapshot, bool) {
	sn, ok := s.s.LookupSnapshot(id)
	return Snapshot{ID: sn.ID, Name: sn.Name, State: sn.State}, ok
}

// SandboxView is a sandbox as the server holds it.
type SandboxView struct {
	// ID is the sandbox's id: the provider lease id of its berth lease.
	ID string
	// State is the API's state: "creating", "started", "stopped", ...
	State string
	// Labels are the sandbox's labels, berth's own included.
	Labels map[string]string
}

// Sandboxes returns every sandbox that is not destroyed, in no particular
// order; nil when there is none.
func (s *Server) Sandboxes() []SandboxView {
	var out []SandboxView
	for _, sb := range s.s.Sandboxes() {
		out = append(out, SandboxView{ID: sb.ID, State: sb.State, Labels: sb.Labels})
	}
	return out
}
