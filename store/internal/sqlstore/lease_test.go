package sqlstore

import (
	"context"
	"maps"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

// twoPools is one lease.Store made of two *DB on the same database, each
// with its own connections (as two host processes have): calls alternate
// between them, so that every rule of the suite, atomicity of keys and
// claims included, is checked across pools (LEASE-8, LEASE-10).
type twoPools struct {
	dbs  [2]*DB
	next atomic.Uint64
}

func (p *twoPools) pick() *DB { return p.dbs[p.next.Add(1)%2] }

func (p *twoPools) InsertLease(ctx context.Context, l *lease.Lease, q lease.Quotas) (*lease.Lease, error) {
	return p.pick().InsertLease(ctx, l, q)
}

func (p *twoPools) GetLease(ctx context.Context, id string) (*lease.Lease, error) {
	return p.pick().GetLease(ctx, id)
}

func (p *twoPools) UpdateLease(ctx context.Context, l *lease.Lease) error {
	return p.pick().UpdateLease(ctx, l)
}

func (p *twoPools) FindByReuseKey(ctx context.Context, key string) (*lease.Lease, error) {
	return p.pick().FindByReuseKey(ctx, key)
}

func (p *twoPools) FindByRunKey(ctx context.Context, key string) (*lease.Lease, error) {
	return p.pick().FindByRunKey(ctx, key)
}

func (p *twoPools) ListLeases(ctx context.Context, f lease.Filter) ([]*lease.Lease, error) {
	return p.pick().ListLeases(ctx, f)
}

func (p *twoPools) ClaimLease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error) {
	return p.pick().ClaimLease(ctx, id, owner, now, until)
}

func (p *twoPools) DeleteLease(ctx context.Context, id string, version int64) error {
	return p.pick().DeleteLease(ctx, id, version)
}

func (p *twoPools) PruneLeases(ctx context.Context, before time.Time, limit int) (int, error) {
	return p.pick().PruneLeases(ctx, before, limit)
}

func (p *twoPools) ClaimForSweep(ctx context.Context, owner string, now, until time.Time, limit int) ([]*lease.Lease, error) {
	return p.pick().ClaimForSweep(ctx, owner, now, until, limit)
}

// The same suite on a store whose every call alternates between two
// separate pools on one database: key and claim atomicity hold across pools.
func TestLeaseStoreTwoPools(t *testing.T) {
	t.Parallel()
	eachDatabase(t, true, func(t *testing.T, url func(*testing.T) string) {
		leasetest.RunStoreTests(t, func(t *testing.T) lease.Store {
			u := url(t)
			return &twoPools{dbs: [2]*DB{openTest(t, u), openTest(t, u)}}
		})
	})
}

// LEASE-1: every field of lease.Lease survives the columns: each is set to
// a distinct non-zero value by reflection, so that a field added to the
// record but not to the table fails here.
func TestLeaseEveryFieldRoundTrips(t *testing.T) {
	t.Parallel()
	in := &lease.Lease{}
	v := reflect.ValueOf(in).Elem()
	base := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch {
		case name == "Redacted":
			// A marker of the redacted view (Manager.Get); never stored.
		case f.Type() == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(base.Add(time.Duration(i) * time.Minute)))
		case f.Type() == reflect.TypeFor[config.Config]():
			f.Set(reflect.ValueOf(config.Config{"image": name}))
		case f.Type() == reflect.TypeFor[*drivers.RunnerSpec]():
			f.Set(reflect.ValueOf(&drivers.RunnerSpec{Binary: "/v-" + name, SHA256: strings.Repeat("ab", 32), Arch: "arm64"}))
		case f.Kind() == reflect.String:
			f.SetString("v-" + name)
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(int64(i%2 + 1)) // 1 or 2: a valid drivers.Disposition
		case f.Type() == reflect.TypeFor[map[string]string]():
			f.Set(reflect.ValueOf(map[string]string{name: "v"}))
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("lease.Lease.%s has type %s, which this test cannot fill: extend it and the leases table", name, f.Type())
		}
	}
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			s := openTest(t, db.url(t))
			want := cloneLease(in)
			if _, err := s.InsertLease(context.Background(), want, lease.Quotas{}); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetLease(context.Background(), want.ID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip (-inserted +got):\n%s", diff)
			}
		})
	}
}

func (p *twoPools) AdoptPooled(ctx context.Context, ad *lease.Lease, q lease.Quotas) (*lease.Lease, error) {
	return p.pick().AdoptPooled(ctx, ad, q)
}

// cloneLease returns a deep copy of l, as a Store returns one.
func cloneLease(l *lease.Lease) *lease.Lease {
	c := *l
	c.Config = l.Config.Clone()
	c.Labels, c.Metadata = maps.Clone(l.Labels), maps.Clone(l.Metadata)
	if l.Runner != nil {
		r := *l.Runner
		c.Runner = &r
	}
	return &c
}
