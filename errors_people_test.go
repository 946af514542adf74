package berth_test

import (
	"context"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/daytona/daytonatest"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
)

var (
	// requirementID and goIdentifier are what a message for a person
	// never holds (issue 50 item 5).
	requirementID = regexp.MustCompile(`(CFG|CAP|PRB|QUAL|IMG|LEASE|ASG|PRP|AUTH|UI|WS|ISO|PLG|SCALE)-[0-9]+`)
	goIdentifier  = regexp.MustCompile(`\b[a-z]+\.[A-Z]\w+`)
)

// spoken is what a provoked failure says to both readers.
type spoken struct {
	code    errcode.ErrorCode
	reason  string
	message string
	detail  string
}

// ofError reads an error's parts.
func ofError(err error) spoken {
	if err == nil {
		return spoken{code: errcode.OK}
	}
	return spoken{code: errcode.Code(err), reason: errcode.ReasonOf(err), message: errcode.MessageOf(err), detail: err.Error()}
}

// ofProbe reads a failed probe's parts: its code is the reason, its
// message the sentence, the failed stage's error the detail.
func ofProbe(t *testing.T, res *probe.Result, err error) spoken {
	t.Helper()
	if err != nil {
		return ofError(err)
	}
	if res.OK {
		t.Fatalf("the probe succeeded: %s", res.Summary)
	}
	s := spoken{code: reason.Code(res.Code), reason: string(res.Code), message: res.Message}
	for _, st := range res.Stages {
		if !st.OK && !st.Skipped {
			s.detail = st.Error
			break
		}
	}
	return s
}

// A table of provoked failures, through the library against real
// components (sshd, the Docker client against a closed port, the fake
// Daytona API): each says its code and reason to a program, one sentence
// of at most 200 characters naming the target to a person (no
// requirement ID, no Go identifier), and keeps the chain as its detail
// (issue 50 item 5). The API's and envctl's rows are in their packages
// (examples/server TestErrorShapeTable, examples/envctl
// TestErrorLineGainsTheCode).
func TestFailuresSpeakToPeople(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := testenv.SSHD(t)
	day, err := daytonatest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(day.Close)
	snap, err := day.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	closed := closedPort(t)
	fk := fake.New(&fake.Options{APIKey: "k-0123456789"})
	sys, err := berth.New(ctx, &berth.Options{
		Drivers: []drivers.Driver{ssh.New(nil), docker.New(nil), fk,
			daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})},
		Stores: store.Memory(), Secrets: environment.NewMemorySecretStore(), TestMode: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	agent := authz.Principal{ID: "agent-7", Role: authz.RoleAgent, Companies: []string{"acme"}}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	create := func(t *testing.T, name, driver string, cfg map[string]any) *environment.View {
		t.Helper()
		v, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: name, Driver: driver, Config: cfg})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return v
	}
	sshCfg := func(knownHosts, key string, port int) map[string]any {
		return map[string]any{ssh.FieldHost: srv.Host(), ssh.FieldPort: port, ssh.FieldUser: srv.User(),
			ssh.FieldPrivateKey: key, ssh.FieldKnownHosts: []any{knownHosts}, ssh.FieldWorkdir: dir}
	}
	probeOf := func(t *testing.T, v *environment.View) spoken {
		res, err := sys.Prober().Probe(ctx, admin, v.ID, probe.Request{Company: "acme"})
		return ofProbe(t, res, err)
	}
	addr := srv.Host() + ":" + strconv.Itoa(srv.Port())
	otherHost := strings.Replace(srv.KnownHostsLine(), srv.Host(), "192.0.2.7", 1)

	for _, tc := range []struct {
		name    string
		run     func(t *testing.T) spoken
		code    errcode.ErrorCode
		reason  string
		target  string // the message names it
		inChain string // the detail keeps it
	}{
		{"unknown host key", func(t *testing.T) spoken {
			return probeOf(t, create(t, "unknown-key", "ssh", sshCfg(otherHost, srv.ClientKeyPEM(), srv.Port())))
		}, errcode.AuthFailed, "host_key_unknown", addr, "host key unknown"},
		{"mismatched host key", func(t *testing.T) spoken {
			return probeOf(t, create(t, "impostor", "ssh", sshCfg(srv.MismatchedKnownHostsLine(), srv.ClientKeyPEM(), srv.Port())))
		}, errcode.AuthFailed, "host_key_mismatch", addr, "host key mismatch"},
		{"wrong key", func(t *testing.T) spoken {
			return probeOf(t, create(t, "wrong-key", "ssh", sshCfg(srv.KnownHostsLine(), srv.UnauthorizedKeyPEM(), srv.Port())))
		}, errcode.AuthFailed, "auth_failed", addr, "authentication failed"},
		{"unreachable host", func(t *testing.T) spoken {
			return probeOf(t, create(t, "gone", "ssh", sshCfg(srv.KnownHostsLine(), srv.ClientKeyPEM(), closed)))
		}, errcode.Unreachable, "unreachable", "127.0.0.1:" + strconv.Itoa(closed), "target unreachable"},
		{"engine down", func(t *testing.T) spoken {
			return probeOf(t, create(t, "no-engine", docker.Name, map[string]any{docker.FieldHost: "tcp://127.0.0.1:" + strconv.Itoa(closed), docker.FieldImage: "debian@sha256:" + strings.Repeat("a", 64)}))
		}, errcode.Unavailable, "provider_unavailable", "127.0.0.1:" + strconv.Itoa(closed), "provider unavailable"},
		{"Daytona 401", func(t *testing.T) spoken {
			return probeOf(t, create(t, "bad-key", daytona.Name, map[string]any{daytona.FieldAPIURL: day.URL(), daytona.FieldAPIKey: "wrong-key-0123456789",
				daytona.FieldOrganizationID: day.OrganizationID(), daytona.FieldSnapshotID: snap.ID}))
		}, errcode.AuthFailed, "auth_failed", "Daytona", "401"},
		{"Daytona 404 (deleted snapshot)", func(t *testing.T) spoken {
			return probeOf(t, create(t, "no-snap", daytona.Name, map[string]any{daytona.FieldAPIURL: day.URL(), daytona.FieldAPIKey: day.APIKey(),
				daytona.FieldOrganizationID: day.OrganizationID(), daytona.FieldSnapshotID: "0b6f3c0e-6d1c-4c8e-9a57-1d2f3e4a5b6c"}))
		}, errcode.NotFound, "image_not_found", "0b6f3c0e-6d1c-4c8e-9a57-1d2f3e4a5b6c", "404"},
		{"missing credentials", func(t *testing.T) spoken {
			_, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: "keyless", Driver: "ssh", Config: map[string]any{
				ssh.FieldHost: srv.Host(), ssh.FieldPort: srv.Port(), ssh.FieldUser: srv.User(), ssh.FieldKnownHosts: []any{srv.KnownHostsLine()}}})
			return ofError(err)
		}, errcode.Invalid, "missing_credentials", `"keyless"`, "private_key"},
		{"stale revision", func(t *testing.T) spoken {
			v := create(t, "edited", fake.Name, map[string]any{"api_key": "k-0123456789"})
			name := "edited-again"
			_, err := sys.Catalog().Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: v.Revision + 5, Name: &name})
			return ofError(err)
		}, errcode.Conflict, "stale_revision", `"edited"`, "stale revision"},
		{"denied", func(t *testing.T) spoken {
			v := create(t, "guarded", fake.Name, map[string]any{"api_key": "k-0123456789"})
			_, err := sys.Catalog().Archive(ctx, agent, v.ID, v.Revision)
			return ofError(err)
		}, errcode.Denied, "", `"guarded"`, "permission denied"},
		{"quota", func(t *testing.T) spoken {
			qsys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fake.New(&fake.Options{APIKey: "k-0123456789"})}, Stores: store.Memory(),
				TestMode: true, Leases: &lease.Options{Quotas: lease.Quotas{PerCompany: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			defer qsys.Close()
			v, err := qsys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: "metered", Driver: fake.Name, Config: map[string]any{"api_key": "k-0123456789"}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = qsys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = qsys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: "r2"})
			return ofError(err)
		}, errcode.Unavailable, "quota_exceeded", `"metered"`, "quota reached"},
		{"unsupported capability", func(t *testing.T) spoken {
			v := create(t, "plain-host", "ssh", sshCfg(srv.KnownHostsLine(), srv.ClientKeyPEM(), srv.Port()))
			_, err := sys.Templates().Setup(ctx, admin, templates.SetupRequest{Environment: v.ID, Name: "tpl"})
			return ofError(err)
		}, errcode.Unsupported, "unsupported", `"plain-host"`, "lacks capability template_capture"},
		{"mutable image", func(t *testing.T) spoken {
			fk.AddImage("registry.fake.test/team/app:v1")
			v := create(t, "floating", fake.Name, map[string]any{"api_key": "k-0123456789", "image": "registry.fake.test/team/app:v1"})
			res, err := sys.Prober().Probe(ctx, admin, v.ID, probe.Request{Company: "acme"})
			if err != nil || !res.OK || res.QualificationDiagnostic == nil {
				t.Fatalf("probe: %v, %+v", err, res)
			}
			d := res.QualificationDiagnostic
			return spoken{code: qualify.ErrorCode(d.Code), reason: d.Code, message: d.Message, detail: res.Summary}
		}, errcode.Conflict, "image_not_pinned", "registry.fake.test/team/app:v1", "floating"},
		{"terminal on a stopped sandbox", func(t *testing.T) spoken {
			v := create(t, "setup-box", fake.Name, map[string]any{"api_key": "k-0123456789"})
			ses, err := sys.Templates().Setup(ctx, admin, templates.SetupRequest{Environment: v.ID, Name: "typed", Interactive: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sys.Templates().Cancel(ctx, admin, ses.ID); err != nil {
				t.Fatal(err)
			}
			_, err = sys.Templates().OpenTerminal(ctx, admin, ses.ID, templates.TerminalSize{Rows: 24, Cols: 80})
			return ofError(err)
		}, errcode.Conflict, "setup_session_not_waiting", `"typed"`, "not waiting_for_user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.run(t)
			if got.code != tc.code || got.reason != tc.reason {
				t.Errorf("code %v, reason %q; want %v, %q (message %q, detail %q)", got.code, got.reason, tc.code, tc.reason, got.message, got.detail)
			}
			m := got.message
			switch {
			case m == "" || len([]rune(m)) > 200:
				t.Errorf("message of %d characters: %q", len([]rune(m)), m)
			case !strings.Contains(m, tc.target):
				t.Errorf("message %q does not name %s", m, tc.target)
			case requirementID.MatchString(m):
				t.Errorf("message %q holds a requirement ID", m)
			case goIdentifier.MatchString(m):
				t.Errorf("message %q holds a Go identifier %q", m, goIdentifier.FindString(m))
			}
			if !strings.Contains(got.detail, tc.inChain) || got.detail == m {
				t.Errorf("detail %q does not keep the chain (%q)", got.detail, tc.inChain)
			}
			t.Logf("%s (%s): %s\n\tdetail: %s", got.code, got.reason, m, got.detail)
		})
	}
}

// closedPort returns a local TCP port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
