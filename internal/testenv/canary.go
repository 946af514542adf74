package testenv

import (
	"bytes"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CanaryInFiles fails t (naming what and the file) for every regular file
// under roots that holds canary, and returns how many files it read.
func CanaryInFiles(t testing.TB, canary, what string, roots ...string) int {
	t.Helper()
	n := 0
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			n++
			if bytes.Contains(b, []byte(canary)) {
				t.Errorf("%s: %s holds it", what, p)
			}
			return nil
		})
	}
	return n
}

// CanaryInPostgres fails t for every table of the PostgreSQL database at
// url (its current schema) with a row that holds canary, and returns how
// many rows it read; reading no table or no row fails t too.
func CanaryInPostgres(t testing.TB, url, canary string) int {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	if len(tables) == 0 {
		t.Fatal("no tables found")
	}
	n := 0
	for _, tb := range tables {
		rs, err := db.Query(fmt.Sprintf(`SELECT row_to_json(x)::text FROM %q x`, tb))
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var s string
			if err := rs.Scan(&s); err != nil {
				t.Fatal(err)
			}
			n++
			if strings.Contains(s, canary) {
				t.Errorf("table %s holds the secret", tb)
			}
		}
		rs.Close()
	}
	if n == 0 {
		t.Error("no rows read from PostgreSQL")
	}
	return n
}
