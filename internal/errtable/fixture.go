package errtable

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/testenv"
)

// NewFixture starts the real components the table of provoked
// failures needs and returns its Fixture: an sshd (its
// keys and known_hosts lines), a fake Daytona API with one snapshot, a
// loopback port nothing listens on, and a work directory. fakeImage and
// fakeKey are the fake driver's mutable tag and api_key, which each
// surface registers with its own fake driver. Everything stops with t.
func NewFixture(t testing.TB, fakeImage, fakeKey string) Fixture {
	t.Helper()
	srv := testenv.SSHD(t)
	day, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(day.Close)
	snap, err := day.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	work, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return Fixture{SSHHost: srv.Host(), SSHPort: srv.Port(), SSHUser: srv.User(), ClientKey: srv.ClientKeyPEM(),
		UnauthorizedKey: srv.UnauthorizedKeyPEM(), KnownHosts: srv.KnownHostsLine(), MismatchedKnown: srv.MismatchedKnownHostsLine(),
		Workdir: work, ClosedPort: closed, DaytonaURL: day.URL(), DaytonaKey: day.APIKey(), DaytonaOrg: day.OrganizationID(),
		DaytonaSnapshot: snap.ID, FakeMutableImage: fakeImage, FakeKey: fakeKey}
}
