package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/berthdev/berth/environment"
)

// The warm pool setting (issue 31) through the API: created, changed by a
// PATCH (a knob: the revision grows), removed with size 0; an invalid one
// is refused naming the field.
func TestEnvironmentPoolSetting(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	var v environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "pooled", "driver": "fake", "pool": map[string]any{"size": 2, "maxAge": "1h"}}}).decode(t, &v)
	if v.Pool == nil || v.Pool.Size != 2 || v.Pool.MaxAge != time.Hour {
		t.Fatalf("created pool %+v", v.Pool)
	}
	patch := call{method: "PATCH", path: "/api/v1/environments/" + v.ID, token: tokAdmin,
		header: map[string]string{"If-Match": `"1"`}, body: map[string]any{"pool": map[string]any{"size": 3}}}
	e.must(t, http.StatusOK, patch).decode(t, &v)
	if v.Pool == nil || v.Pool.Size != 3 || v.Revision != 2 {
		t.Fatalf("patched pool %+v at revision %d", v.Pool, v.Revision)
	}
	bad := patch
	bad.header = map[string]string{"If-Match": `"2"`}
	bad.body = map[string]any{"pool": map[string]any{"size": 1000}}
	if er := e.must(t, http.StatusBadRequest, bad).err(t); er.Field != "pool" || er.Code != "invalid" {
		t.Fatalf("a pool too big: %+v", er)
	}
	patch.header = map[string]string{"If-Match": `"2"`}
	patch.body = map[string]any{"pool": map[string]any{"size": 0}}
	var gone environment.View
	e.must(t, http.StatusOK, patch).decode(t, &gone)
	if gone.Pool != nil || gone.Revision != 3 {
		t.Fatalf("pool after removing it: %+v at revision %d", gone.Pool, gone.Revision)
	}
}
