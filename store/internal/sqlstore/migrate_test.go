package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func names(cs []Component) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func comp(name string, versions int, after ...string) Component {
	c := Component{Name: name, After: after}
	for v := 1; v <= versions; v++ {
		c.Migrations = append(c.Migrations, Migration{Version: v, Name: "step", SQL: []string{"SELECT 1"}})
	}
	return c
}

func TestOrderComponents(t *testing.T) {
	t.Parallel()
	gap := comp("gap", 2)
	gap.Migrations[1].Version = 3
	empty := comp("empty", 1)
	empty.Migrations[0].SQL = nil
	tests := []struct {
		name    string
		in      []Component
		want    []string
		wantErr string
	}{
		{"sorted by name", []Component{comp("lease", 1), comp("environment", 2)}, []string{"environment", "lease"}, ""},
		{"After wins over name order", []Component{comp("a", 1, "b"), comp("b", 1)}, []string{"b", "a"}, ""},
		{"transitive After", []Component{comp("a", 1, "c"), comp("b", 1), comp("c", 1, "b")}, []string{"b", "c", "a"}, ""},
		{"duplicate name", []Component{comp("a", 1), comp("a", 1)}, nil, "registered twice"},
		{"upper case name", []Component{comp("Lease", 1)}, nil, "lower case"},
		{"version gap", []Component{gap}, nil, "has version 3, want 2"},
		{"migration without SQL", []Component{empty}, nil, "no SQL"},
		{"unknown After", []Component{comp("a", 1, "zz")}, nil, `unknown component "zz"`},
		{"cycle", []Component{comp("a", 1, "b"), comp("b", 1, "a")}, nil, "cycle"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := orderComponents(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, names(got)); d != "" {
				t.Errorf("order (-want +got):\n%s", d)
			}
		})
	}
}

// The registered components are valid and include environment.
func TestRegisteredComponents(t *testing.T) {
	t.Parallel()
	all, err := allComponents()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names(all), ","), "environment") {
		t.Errorf("components %v lack environment", names(all))
	}
}

func wantVersions(t *testing.T, db *DB) {
	t.Helper()
	all, err := allComponents()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, c := range all {
		want[c.Name] = len(c.Migrations)
	}
	got, err := db.SchemaVersions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("schema versions (-want +got):\n%s", d)
	}
	var rows int
	if err := db.reads().queryRow(context.Background(), "SELECT COUNT(*) FROM schema_migrations").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, v := range want {
		total += v
	}
	if rows != total {
		t.Errorf("schema_migrations has %d rows, want %d (each migration recorded once)", rows, total)
	}
}

func TestMigrationsAreIdempotent(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	openTest(t, url).Close()
	db := openTest(t, url) // the second Open finds nothing to do
	wantVersions(t, db)
}

func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	db := openTest(t, url)
	if _, err := db.writes().exec(context.Background(),
		"INSERT INTO schema_migrations (component, version, name, applied_at) VALUES ('environment', 99, 'future', 0)"); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), url, TestOptions)
	if err == nil || !strings.Contains(err.Error(), "newer than this build knows") {
		t.Fatalf("Open of a newer schema: got %v, want a refusal", err)
	}
}

// Several stores opening one database at once: every Open succeeds and each
// migration is applied once.
func testConcurrentOpen(t *testing.T, url string) {
	const n = 6
	dbs := make([]*DB, n)
	errs := make([]error, n)
	start := make(chan struct{})
	done := make(chan int)
	for i := range n {
		go func() {
			<-start
			dbs[i], errs[i] = Open(context.Background(), url, TestOptions)
			done <- i
		}()
	}
	close(start)
	for range n {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { dbs[i].Close() })
	}
	wantVersions(t, dbs[0])
}

func TestConcurrentOpenSQLite(t *testing.T) {
	t.Parallel()
	testConcurrentOpen(t, sqliteURL(t))
}

func TestRebind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    dialect
		in   string
		want string
	}{
		{sqlite, "SELECT a FROM t WHERE a = ? AND b = ?", "SELECT a FROM t WHERE a = ? AND b = ?"},
		{postgres, "SELECT a FROM t WHERE a = ? AND b = ?", "SELECT a FROM t WHERE a = $1 AND b = $2"},
		{postgres, "SELECT 1", "SELECT 1"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v %s", tc.d, tc.in), func(t *testing.T) {
			t.Parallel()
			if got := tc.d.rebind(tc.in); got != tc.want {
				t.Errorf("rebind = %q, want %q", got, tc.want)
			}
		})
	}
}
