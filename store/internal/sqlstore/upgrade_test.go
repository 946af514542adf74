package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/environment/environmenttest"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// Issue 25: a database written by the code before the store per package
// (testdata/upgrade, see its README) opens, runs every migration since, and
// reads back every row it held; it takes writes afterwards.
func TestUpgradeFromFixtures(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		b, err := os.ReadFile("testdata/upgrade/berth.db")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "berth.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		checkUpgraded(t, openTest(t, "sqlite://"+path))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := testenv.Postgres(t)
		loadDump(t, url, "testdata/upgrade/berth.pgdump.sql")
		checkUpgraded(t, openTest(t, url))
	})
}

// loadDump runs the statements of a plain pg_dump file on the database at
// url, on a pool of its own (the dump empties search_path for its
// session). psql's meta-commands (\restrict) are left out.
func loadDump(t testing.TB, url, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, `\`) {
			kept = append(kept, line)
		}
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, strings.Join(kept, "\n")); err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
}

// checkUpgraded checks that db holds makeUpgradeRows, migrated to the
// newest schema, and takes writes.
func checkUpgraded(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	r := makeUpgradeRows()
	cmpOpts := cmp.Options{
		environmenttest.ConfigAsJSON(),
		cmp.Comparer(func(a, b images.Identity) bool { return a == b }),
		cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
	}
	check := func(what string, want, got any, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		if d := cmp.Diff(want, got, cmpOpts); d != "" {
			t.Errorf("%s (-fixture +read):\n%s", what, d)
		}
	}

	// Every component is at the binary's newest version.
	comps, err := allComponents()
	if err != nil {
		t.Fatal(err)
	}
	vs, err := db.SchemaVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comps {
		if want := c.Migrations[len(c.Migrations)-1].Version; vs[c.Name] != want {
			t.Errorf("component %s at version %d after Open, want %d", c.Name, vs[c.Name], want)
		}
	}

	for _, e := range r.environments {
		got, err := db.GetEnvironment(ctx, e.ID)
		check("environment "+e.ID, e, got, err)
	}
	for _, b := range r.bindings {
		got, err := db.GetBinding(ctx, b.BindingRef)
		check("binding "+b.String(), b, got, err)
	}
	// Binding keys are per company since bindings' migration 2 (issue 51):
	// another company binds an upgraded binding's key beside it.
	for _, b := range r.bindings {
		if b.Kind == environment.BindingInstanceDefault {
			continue
		}
		other := *b
		other.Company, other.Revision = "company-beside-"+b.Company, 1
		if err := db.PutBinding(ctx, &other, 0); err != nil {
			t.Errorf("another company's %s beside the upgraded one: %v", b.BindingRef, err)
		}
		got, err := db.GetBinding(ctx, b.BindingRef)
		check("binding "+b.String()+" beside another company's", b, got, err)
	}
	for _, h := range r.health {
		got, err := db.GetProviderHealth(ctx, h.Driver, h.Endpoint)
		check("health of "+h.Endpoint, h, got, err)
	}
	for _, q := range r.qualifications {
		got, err := db.GetQualification(ctx, q.Company, q.Environment)
		check("qualification of "+q.Company, q, got, err)
	}
	for _, l := range r.leases {
		got, err := db.GetLease(ctx, l.ID)
		want := *l
		want.Version = 1
		check("lease "+l.ID, &want, got, err)
	}
	for _, a := range r.authChecks {
		got, err := db.GetAuthCheck(ctx, a.Company, a.AccountRef)
		check("auth check "+a.AccountRef, a, got, err)
	}
	// A retired secret version still in use is freed by its lease's
	// release; a version that was never retired is not.
	free, err := db.ReleaseSecrets(ctx, "lease_active")
	check("secrets freed by lease_active", []config.SecretRef{{ID: "sec_key", Version: 1}}, free, err)
	free, err = db.ReleaseSecrets(ctx, "lease_draft")
	check("secrets freed by lease_draft", []config.SecretRef(nil), free, err)

	ps := db.PRP()
	for _, s := range r.sessions {
		got, err := ps.GetSession(ctx, s.ID)
		check("session "+s.ID, s, got, err)
	}
	now := upgradeT0.Add(33 * time.Minute)
	if _, err := ps.ConsumeTicket(ctx, r.tickets[0].Hash, "lease_active", "s_x", now); !errors.Is(err, prp.ErrTicketReplayed) {
		t.Errorf("consuming the used ticket = %v, want ErrTicketReplayed", err)
	}
	got, err := ps.ConsumeTicket(ctx, r.tickets[1].Hash, "lease_active", "s_1", now)
	if err != nil || got.Resume != "s_1" || !got.Holder || got.Session != "s_1" {
		t.Errorf("consuming the resume ticket = %+v, %v; want the resume of s_1 as holder", got, err)
	}
	if got, err := ps.ConsumeTicket(ctx, r.tickets[2].Hash, "lease_draft", "s_3", now); err != nil || got.Scope != prp.ScopeProbe {
		t.Errorf("consuming the probe ticket = %+v, %v; want its probe grant", got, err)
	}
	for _, c := range r.commands {
		rec, err := ps.GetCommand(ctx, c.session, c.command.ID)
		if err != nil {
			t.Errorf("command %s: %v", c.command.ID, err)
			continue
		}
		check("command "+c.command.ID, c.command, rec.Command, nil)
		check("result of "+c.command.ID, c.result, rec.Result, nil)
		wantState := prp.JournalReceived
		if c.result != nil {
			wantState = prp.JournalDone
		}
		if rec.State != wantState {
			t.Errorf("command %s state %s, want %s", c.command.ID, rec.State, wantState)
		}
		if ok, err := ps.ClaimSecrets(ctx, c.session, c.command.ID, now); err != nil || ok == c.secretsSent {
			t.Errorf("ClaimSecrets of %s = %t, %v; secrets were sent before: %t", c.command.ID, ok, err, c.secretsSent)
		}
	}
	evs, err := ps.EventsAfter(ctx, "s_1", 0, 0)
	check("events of s_1", r.events, evs, err)
	for _, u := range r.usage["s_1"] {
		got, err := ps.OutputUsage(ctx, "s_1", u.Task)
		check("output usage of "+u.Task, u.Usage, got, err)
	}

	// Writes after the upgrade: the journal goes on from its last seq, a
	// lease update passes its version check, a new lease is inserted.
	next := prpwire.SealCommand(prp.Command{ID: "c_4", Kind: prp.CommandTaskStop, Lease: "lease_active", Run: "run-1",
		TaskStop: &prp.TaskStop{TaskID: "t_2"}})
	if rec, _, err := ps.AppendCommand(ctx, "s_1", next, now); err != nil || rec.Seq != 4 {
		t.Errorf("AppendCommand after the upgrade = seq %d, %v; want seq 4", rec.Seq, err)
	}
	l, err := db.GetLease(ctx, "lease_active")
	if err != nil {
		t.Fatal(err)
	}
	l.Uses++
	if err := db.UpdateLease(ctx, l); err != nil {
		t.Errorf("UpdateLease after the upgrade: %v", err)
	}
	fresh := &lease.Lease{ID: "lease_new", Company: "acme", Environment: "env_ssh", Status: lease.StatusStarting,
		Policy: lease.Ephemeral, Provider: "ssh", AcquiredAt: now, Fingerprint: "sha256:ee", ReuseKey: "reuse-ws-1"}
	if _, err := db.InsertLease(ctx, fresh, lease.Quotas{}); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("InsertLease with the reuse key of an upgraded live lease = %v, want ErrConflict", err)
	}
	fresh.ReuseKey = "reuse-new"
	if _, err := db.InsertLease(ctx, fresh, lease.Quotas{}); err != nil {
		t.Errorf("InsertLease after the upgrade: %v", err)
	}
}
