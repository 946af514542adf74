package sqlstore

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/berthdev/berth/environment"
)

// A SQLite store holds configs: its database file and the -wal and -shm files
// beside it are created 0600 even under umask 0 in a world-writable setgid
// directory. Not parallel: the umask is the process's.
func TestSQLiteFilesArePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	path := filepath.Join(dir, "berth.db")
	db := openTest(t, "sqlite://"+path)
	e := &environment.Environment{ID: "e", Name: "e", Driver: "local", Status: environment.StatusActive, Revision: 1}
	if err := db.CreateEnvironment(context.Background(), e, false); err != nil {
		t.Fatal(err)
	}
	// A read opens the -shm through the read pool too.
	if _, err := db.GetEnvironment(context.Background(), "e"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(name), err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", filepath.Base(name), mode)
		}
	}
}
