package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/berthdev/berth/environment"
)

// Idempotency records expire (idempotencyTTL), and one left running (its
// server died, or its final write failed) is given up after
// idempotencyPending, so that a retry runs instead of being refused as
// still running forever. The records are aged in the database.
func TestIdempotencyRecordsExpire(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, nil)
			h := e.s.host
			age := func(key string, secs int64, pending bool) {
				t.Helper()
				q := `UPDATE server_idempotency SET created_at = created_at - ? WHERE idem_key = ?`
				if pending {
					q = `UPDATE server_idempotency SET created_at = created_at - ?, status = 0 WHERE idem_key = ?`
				}
				if _, err := h.db.ExecContext(context.Background(), h.q(q), secs, key); err != nil {
					t.Fatal(err)
				}
			}
			create := func(key, name string, want int) *environment.View {
				t.Helper()
				var v environment.View
				r := e.must(t, want, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
					header: map[string]string{"Idempotency-Key": key}, body: map[string]any{"name": name, "driver": "fake"}})
				if want == http.StatusCreated {
					r.decode(t, &v)
				}
				return &v
			}

			create("k1", "first", http.StatusCreated)
			create("k1", "other", http.StatusConflict) // the key names another request
			age("k1", int64(idempotencyTTL.Seconds())+60, false)
			if v := create("k1", "other", http.StatusCreated); v.Name != "other" {
				t.Errorf("after the record expired, the create made %+v", v)
			}

			create("k2", "second", http.StatusCreated)
			age("k2", 0, true) // as if the first request never finished
			retry := call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				header: map[string]string{"Idempotency-Key": "k2"}, body: map[string]any{"name": "second", "driver": "fake"}}
			if er := e.must(t, http.StatusConflict, retry).err(t); er.Field != "Idempotency-Key" {
				t.Errorf("a retry while the first runs: %+v, want refused on the key", er)
			}
			age("k2", int64(idempotencyPending.Seconds())+60, true)
			// Given up, the retry runs: the catalog answers, its name being
			// taken by the first request's environment.
			if er := e.must(t, http.StatusConflict, retry).err(t); er.Field == "Idempotency-Key" || er.Code != "conflict" {
				t.Errorf("a retry after the pending record was given up: %+v, want it run (the name is taken)", er)
			}
		})
	}
}
