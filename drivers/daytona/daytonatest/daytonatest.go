// Package daytonatest is a fake Daytona API for tests of hosts that use the
// daytona driver: an httptest server on 127.0.0.1 that keeps the real API's
// rules (409 while a state change is pending, soft delete then 404, 408 on
// an exec timeout, the snapshot name rules, a create that answers before the
// sandbox is started) and runs the sandboxes' commands on this host.
//
//	srv, err := daytonatest.New()
//	defer srv.Close()
//	snap, err := srv.CreateSnapshot("base:1.0", "debian:12.7")
//	cfg := map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey(),
//		"snapshot_id": snap}
//	// ... acquire and release through berth, then:
//	left := srv.Sandboxes() // none once every lease is released
//
// New makes a server; Sandboxes reads back what the driver left. The
// daytona driver's own tests use the whole fake, with its fault injection,
// timing knobs and fake clock, which is internal to berth.
package daytonatest

import "github.com/berthdev/berth/internal/daytonafake"

// Server is a running fake Daytona API. Its methods are safe for concurrent
// use.
type Server struct {
	s *daytonafake.Server
}

// New starts a server on 127.0.0.1 with no sandboxes and no snapshots,
// accepting the API key "daytonatest-key"; it runs on the wall clock.
// Close it.
func New() (*Server, error) {
	s, err := daytonafake.New(nil)
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

// Close kills every process the sandboxes run, stops the server and removes
// the sandboxes' directories.
func (s *Server) Close() { s.s.Close() }

// CreateSnapshot adds an active snapshot named name for image imageName,
// with the API's rules (imageName needs a tag or digest and not ":latest";
// names are unique), and returns its id, a new UUID: the driver's
// snapshot_id.
func (s *Server) CreateSnapshot(name, imageName string) (id string, err error) {
	sn, err := s.s.CreateSnapshot(name, imageName)
	return sn.ID, err
}

// Sandboxes returns the ids of every sandbox that is not destroyed (the
// provider lease ids of their berth leases), in no particular order; nil
// when there is none.
func (s *Server) Sandboxes() []string {
	var out []string
	for _, sb := range s.s.Sandboxes() {
		out = append(out, sb.ID)
	}
	return out
}
