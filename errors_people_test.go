package berth_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/errtable"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
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
		if !st.OK && st.Code != "" { // failed, not skipped
			s.detail = st.Error
			break
		}
	}
	return s
}

// A table of provoked failures (internal/errtable, shared with the API's
// and envctl's tests), through the library against real components
// (sshd, the Docker client against a closed port, the fake Daytona API):
// each says its code and reason to a program, one sentence of at most 200
// characters naming the target to a person (no requirement ID, no Go
// identifier), and keeps the chain as its detail (issue 50 item 5). The
// library adds the rows only it can provoke (stale revision, denied). The
// API's rows are examples/server TestErrorShapeTable, envctl's
// examples/envctl TestErrorLinesSpeakToPeople.
func TestFailuresSpeakToPeople(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fx := errtable.NewFixture(t, "registry.fake.test/team/app:v1", "k-0123456789")
	fk := fake.New(&fake.Options{APIKey: fx.FakeKey})
	fk.AddImage(fx.FakeMutableImage)
	newSystem := func(t *testing.T, leases *lease.Options) *berth.System {
		sys, err := berth.New(ctx, &berth.Options{
			Drivers: []drivers.Driver{ssh.New(nil), docker.New(nil), fk,
				daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})},
			Stores: store.Memory(), Secrets: envhook.NewMemorySecretStore().(environment.SecretStore), TestMode: true, Leases: leases,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sys.Close() })
		return sys
	}
	sys := newSystem(t, nil)
	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	agent := authz.Principal{ID: "agent-7", Role: authz.RoleAgent, Companies: []string{"acme"}}
	create := func(t *testing.T, sys *berth.System, e errtable.Env) *environment.View {
		t.Helper()
		v, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: e.Name, Driver: e.Driver, Config: e.Config})
		if err != nil {
			t.Fatalf("create %s: %v", e.Name, err)
		}
		return v
	}
	provoke := func(t *testing.T, r errtable.Row) spoken {
		switch r.Action {
		case errtable.Probe:
			res, err := sys.Prober().Probe(ctx, admin, create(t, sys, r.Env).ID, probe.Request{Company: "acme"})
			return ofProbe(t, res, err)
		case errtable.Create:
			_, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: r.Env.Name, Driver: r.Env.Driver, Config: r.Env.Config})
			return ofError(err)
		case errtable.Qualify:
			res, err := sys.Prober().Probe(ctx, admin, create(t, sys, r.Env).ID, probe.Request{Company: "acme"})
			if err != nil || !res.OK || res.QualificationDiagnostic == nil {
				t.Fatalf("probe: %v, %+v", err, res)
			}
			d := res.QualificationDiagnostic
			return spoken{code: qualify.ErrorCode(d.Code), reason: d.Code, message: d.Message, detail: res.Summary}
		case errtable.Setup:
			_, err := sys.Templates().Setup(ctx, admin, templates.SetupRequest{Environment: create(t, sys, r.Env).ID, Name: "tpl"})
			return ofError(err)
		case errtable.StoppedTerminal:
			ses, err := sys.Templates().Setup(ctx, admin, templates.SetupRequest{Environment: create(t, sys, r.Env).ID, Name: "typed", Interactive: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sys.Templates().Cancel(ctx, admin, ses.ID); err != nil {
				t.Fatal(err)
			}
			_, err = sys.Templates().OpenTerminal(ctx, admin, ses.ID, 24, 80)
			return ofError(err)
		case errtable.Quota:
			qsys := newSystem(t, &lease.Options{Quotas: lease.Quotas{PerCompany: 1}})
			v := create(t, qsys, r.Env)
			if _, err := qsys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: "r1"}); err != nil {
				t.Fatal(err)
			}
			_, err := qsys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: "r2"})
			return ofError(err)
		}
		t.Fatalf("row %q: action %d is not provoked here", r.Name, r.Action)
		return spoken{}
	}
	rows := errtable.Rows(fx)
	// The rows only the library provokes.
	for _, r := range []struct {
		row errtable.Row
		run func(t *testing.T) spoken
	}{
		{errtable.Row{Name: "stale revision", Code: "conflict", Reason: "stale_revision", Target: `"edited"`, InChain: "stale revision"}, func(t *testing.T) spoken {
			v := create(t, sys, errtable.Env{Name: "edited", Driver: fake.Name, Config: map[string]any{"api_key": fx.FakeKey}})
			name := "edited-again"
			_, err := sys.Catalog().Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: v.Revision + 5, Name: &name})
			return ofError(err)
		}},
		{errtable.Row{Name: "denied", Code: "denied", Target: `"guarded"`, InChain: "permission denied"}, func(t *testing.T) spoken {
			v := create(t, sys, errtable.Env{Name: "guarded", Driver: fake.Name, Config: map[string]any{"api_key": fx.FakeKey}})
			_, err := sys.Catalog().Archive(ctx, agent, v.ID, v.Revision)
			return ofError(err)
		}},
	} {
		t.Run(r.row.Name, func(t *testing.T) { check(t, r.row, r.run(t)) })
	}
	for _, r := range rows {
		t.Run(r.Name, func(t *testing.T) { check(t, r, provoke(t, r)) })
	}
}

// check reports what errtable.Check finds wrong with got.
func check(t *testing.T, r errtable.Row, got spoken) {
	t.Helper()
	for _, p := range errtable.Check(r, got.code.String(), got.reason, got.message, got.detail) {
		t.Error(p)
	}
	t.Logf("%s (%s): %s\n\tdetail: %s", got.code, got.reason, got.message, got.detail)
}
