package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/testenv"
)

func TestSQLitePath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url, path string
		memory    bool
		bad       bool
	}{
		{url: "sqlite:///var/lib/berth/berth.db", path: "/var/lib/berth/berth.db"},
		{url: "sqlite://data/berth.db", path: "data/berth.db"},
		{url: "sqlite::memory:", memory: true},
		{url: "sqlite://:memory:", memory: true},
		{url: "sqlite:/x.db", bad: true},
		{url: "sqlite://", bad: true},
		{url: "sqlite:///x.db?mode=ro", bad: true},
		{url: "sqlite:///tmp/Test#01/x y.db", path: "/tmp/Test#01/x y.db"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			path, memory, err := sqlitePath(tc.url)
			if tc.bad {
				if err == nil {
					t.Fatalf("sqlitePath(%q) = %q, want an error", tc.url, path)
				}
				return
			}
			if err != nil || path != tc.path || memory != tc.memory {
				t.Errorf("sqlitePath(%q) = %q, %v, %v; want %q, %v", tc.url, path, memory, err, tc.path, tc.memory)
			}
		})
	}
}

// Security: a store URL's password never appears in errors.
func TestOpenErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, url := range []string{
		"postgres://berth:canary-s3cret@127.0.0.1:1/berth?sslmode=disable&connect_timeout=2",
		"mysql://berth:canary-s3cret@127.0.0.1/berth",
		"postgres://berth@127.0.0.1:1/berth?password=canary-s3cret&connect_timeout=2",
		"postgres://berth:canary-s3cret@[::1/berth",
	} {
		_, err := Open(ctx, url, TestOptions)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", url)
		}
		if strings.Contains(err.Error(), "canary-s3cret") {
			t.Errorf("error reveals the password: %v", err)
		}
	}
}

func TestOpenCreatesSQLiteFileAndDirsInWALMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "new #1", "dir", "berth.db")
	db := openTest(t, "sqlite://"+path)
	var mode string
	if err := db.reads().queryRow(context.Background(), "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	if db.Dialect() != "sqlite" {
		t.Errorf("Dialect() = %q", db.Dialect())
	}
}

// Times are stored in UTC with nanosecond precision on every dialect.
func TestTimesComeBackInUTC(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]func(t testing.TB) string{"sqlite": sqliteURL, "postgres": testenv.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := openTest(t, url(t))
			at := time.Date(2030, 1, 2, 3, 4, 5, 999999999, time.FixedZone("X", -7*3600))
			e := &environment.Environment{ID: "e", Name: "e", Driver: "ssh", Status: environment.StatusActive, Revision: 1, CreatedAt: at, UpdatedAt: at}
			if err := db.CreateEnvironment(context.Background(), e, false); err != nil {
				t.Fatal(err)
			}
			got, err := db.GetEnvironment(context.Background(), "e")
			if err != nil {
				t.Fatal(err)
			}
			if got.CreatedAt.Location() != time.UTC || !got.CreatedAt.Equal(at) || got.CreatedAt.Nanosecond() != at.Nanosecond() {
				t.Errorf("CreatedAt = %v, want %v in UTC", got.CreatedAt, at.UTC())
			}
		})
	}
}

// LEASE-10 shape, on the environment component: two stores with separate
// pools on one PostgreSQL database (as two host replicas would have) migrate
// concurrently at Open, and of 20 exclusive creates spread over both exactly
// one wins; of 20 updates from one base revision exactly one wins.
func TestTwoStoresOnOnePostgres(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	t.Run("concurrent open", func(t *testing.T) { testConcurrentOpen(t, url) })
	a, b := openTest(t, url), openTest(t, url)
	twoStores(t, a, b)
}

// The same on one SQLite file: two stores are two writers as two processes
// would be, kept apart by the file lock and busy_timeout.
func TestTwoStoresOnOneSQLiteFile(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	a, b := openTest(t, url), openTest(t, url)
	twoStores(t, a, b)
}

func twoStores(t *testing.T, a, b *DB) {
	ctx := context.Background()
	const n = 20
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		go func() {
			<-start
			e := &environment.Environment{ID: fmt.Sprintf("local-%d", i), Name: fmt.Sprintf("local %d", i),
				Driver: "local", Status: environment.StatusActive, Revision: 1}
			errs <- s.CreateEnvironment(ctx, e, true)
		}()
	}
	close(start)
	wins := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, errcode.ErrConflict):
			t.Errorf("exclusive create: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d exclusive creates won across two stores, want 1", wins)
	}
	list, err := b.ListEnvironments(ctx, environment.ListFilter{Driver: "local"})
	if err != nil || len(list) != 1 {
		t.Fatalf("store b sees %d local environments (%v), want 1", len(list), err)
	}

	start = make(chan struct{})
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		go func() {
			<-start
			e := *list[0]
			e.Description = fmt.Sprintf("writer %d", i)
			e.Revision = 2
			errs <- s.UpdateEnvironment(ctx, &e, 1)
		}()
	}
	close(start)
	wins = 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, errcode.ErrConflict):
			t.Errorf("update: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d updates from revision 1 won across two stores, want 1", wins)
	}
}
