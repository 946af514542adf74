package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/postgres"
	"github.com/berthdev/berth/store/sqlite"
)

// openStores opens the SQL store at url (sqlite:// or postgres://) for the
// test, closed at cleanup, and returns its Stores.
func openStores(t *testing.T, url string) store.Stores {
	t.Helper()
	var (
		st    store.Stores
		close func() error
	)
	if strings.HasPrefix(url, "sqlite:") {
		db, err := sqlite.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		st, close = db.Stores(), db.Close
	} else {
		db, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		st, close = db.Stores(), db.Close
	}
	t.Cleanup(func() { close() })
	return st
}
