package daytonafake_test

import (
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/daytonafake"
)

// The snapshot lifecycle of v0.190.0: created pending, then active; aged
// past 14 idle days, inactive (creates refused); activation by UUID only,
// not within 10 minutes of the deactivation, pending, then active.
func TestSnapshotActivationRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{SnapshotDelay: time.Minute})
	made := c.want("POST", "/snapshots", map[string]any{"name": "s", "imageName": "debian:12"}, 200)
	if made["state"] != "pending" {
		t.Errorf("a new snapshot is %v, want pending", made["state"])
	}
	srv.Advance(time.Minute)
	id := made["id"].(string)
	if got := c.want("GET", "/snapshots/"+id, nil, 200); got["state"] != "active" {
		t.Fatalf("after the delay the snapshot is %v, want active", got["state"])
	}
	c.want("POST", "/snapshots/"+id+"/activate", nil, 400) // already active
	if err := srv.AgeSnapshot(id, daytonafake.SnapshotIdleLimit+5*time.Minute); err != nil {
		t.Fatal(err)
	}
	c.want("POST", "/sandbox", map[string]any{"snapshot": id}, 400) // "Snapshot <id> is inactive"
	c.want("POST", "/snapshots/s/activate", nil, 400)               // a name is not a UUID
	c.want("POST", "/snapshots/"+id+"/activate", nil, 400)          // cooldown: deactivated 5 minutes ago
	srv.Advance(5 * time.Minute)
	if got := c.want("POST", "/snapshots/"+id+"/activate", nil, 200); got["state"] != "pending" {
		t.Errorf("activation answered %v, want pending", got["state"])
	}
	srv.Advance(time.Minute)
	c.want("POST", "/sandbox", map[string]any{"snapshot": id}, 200)
}

// GET /sandbox's default order is by last activity, newest first, with the
// cursor on it; sort=createdAt&order=asc is stable while sandboxes are used.
func TestListSortAndCursor(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{PageSize: 1})
	snap, _ := srv.CreateSnapshot("base:1", "debian:12")
	var ids []string
	for range 3 {
		sb := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID}, 200)
		ids = append(ids, sb["id"].(string))
	}
	srv.Advance(time.Minute) // all started
	walk := func(q url.Values, touch string) []string {
		var got []string
		for {
			page := c.want("GET", "/sandbox?"+q.Encode(), nil, 200)
			for _, it := range page["items"].([]any) {
				got = append(got, it.(map[string]any)["id"].(string))
			}
			if touch != "" {
				c.want("POST", srv.ToolboxProxyURL()+"/"+touch+"/process/execute", map[string]any{"command": "true"}, 200)
				touch = ""
			}
			next, _ := page["nextCursor"].(string)
			if next == "" {
				return got
			}
			q.Set("cursor", next)
		}
	}
	// Default: the last one created is the most recently active; using
	// the oldest after the first page moves it before the cursor: missed.
	if got := walk(url.Values{}, ids[0]); len(got) != 2 || got[0] != ids[2] || got[1] != ids[1] {
		t.Errorf("default walk with activity = %v, want [%s %s] (the used one skipped)", got, ids[2], ids[1])
	}
	if got := walk(url.Values{"sort": {"createdAt"}, "order": {"asc"}}, ids[0]); len(got) != 3 {
		t.Errorf("createdAt walk with activity = %v, want all three", got)
	}
	c.want("GET", "/sandbox?sort=color", nil, 400)
	c.want("GET", "/sandbox?cursor=!!", nil, 400)
}

// The snapshot-from-sandbox rules of v0.190.0
// (sandbox.service.ts createSnapshotFromSandbox, dto/create-sandbox-snapshot.dto.ts,
// utils/persist-snapshot-from-sandbox.util.ts): an unknown sandbox is 404
// before the body is checked; the name must be a string without HTML,
// URLs or control characters (400); includeMemory is for Windows only
// (400); a sandbox that is not started or stopped (snapshotting, say) is
// 400, checked before a pending change (409); the snapshot is saved
// active, never pending.
func TestSnapshotFromSandboxRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{StopDelay: time.Minute})
	snap, _ := srv.CreateSnapshot("base:1", "debian:12")
	sb := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID}, 200)
	id := sb["id"].(string)
	srv.Advance(time.Minute) // started
	c.want("POST", "/sandbox/no-such-sandbox/snapshot", map[string]any{"name": "<b>"}, 404)
	for _, tc := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{}, "name must be a string"},
		{map[string]any{"name": "<b>x</b>"}, "name must not contain HTML tags, URLs, or control characters"},
		{map[string]any{"name": "see https://example.com"}, "name must not contain HTML tags, URLs, or control characters"},
		{map[string]any{"name": "bell\x07"}, "name must not contain HTML tags, URLs, or control characters"},
		{map[string]any{"name": "ok", "includeMemory": true}, "includeMemory is only supported for Windows sandboxes"},
	} {
		if got := c.want("POST", "/sandbox/"+id+"/snapshot", tc.body, 400); got["message"] != tc.msg {
			t.Errorf("POST snapshot %v: message %q, want %q", tc.body, got["message"], tc.msg)
		}
	}
	// A display name with spaces and capitals is fine here (no format rule).
	if got := c.want("POST", "/sandbox/"+id+"/snapshot", map[string]any{"name": "My Env v1"}, 200); got["state"] != "snapshotting" {
		t.Errorf("snapshot request answered state %v, want snapshotting", got["state"])
	}
	// The state check comes before the pending one: snapshotting is 400.
	if got := c.want("POST", "/sandbox/"+id+"/snapshot", map[string]any{"name": "again"}, 400); got["message"] != "Sandbox must be in started or stopped state to create a snapshot" {
		t.Errorf("a snapshot while snapshotting: %v", got["message"])
	}
	srv.Advance(time.Minute) // the state is restored, then the snapshot saved
	saved := c.want("GET", "/snapshots/My Env v1", nil, 200)
	if saved["state"] != "active" {
		t.Errorf("a snapshot saved from a sandbox is %v, want active (persisted active)", saved["state"])
	}
}

// The POST /snapshots name rules of v0.190.0 (snapshot.service.ts
// createFromPull, validateSnapshotName with IMAGE_NAME_REGEX): a missing
// name, an unsafe one, one outside the format, no image name.
func TestCreateSnapshotNameRules(t *testing.T) {
	t.Parallel()
	_, _, c := newServer(t, daytonafake.Knobs{})
	for _, tc := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{"imageName": "debian:12"}, "name must be a string"},
		{map[string]any{"name": "<i>", "imageName": "debian:12"}, "name must not contain HTML tags, URLs, or control characters"},
		{map[string]any{"name": "ok"}, "Must specify an image name"},
		{map[string]any{"name": "two words", "imageName": "debian:12"}, "Invalid snapshot name format. May contain letters, digits, dots, colons, and dashes"},
		{map[string]any{"name": "", "imageName": "debian:12"}, "Invalid snapshot name format. May contain letters, digits, dots, colons, and dashes"},
		{map[string]any{"name": "ok", "imageName": "debian"}, "Image name must include a tag (e.g., ubuntu:22.04) or digest (@sha256:...)"},
	} {
		if got := c.want("POST", "/snapshots", tc.body, 400); got["message"] != tc.msg {
			t.Errorf("POST /snapshots %v: message %q, want %q", tc.body, got["message"], tc.msg)
		}
	}
	c.want("POST", "/snapshots", map[string]any{"name": "Tools_2.1:x", "imageName": "debian:12"}, 200)
	c.want("POST", "/snapshots", map[string]any{"name": "Tools_2.1:x", "imageName": "debian:13"}, 409)
}

// DELETE /snapshots/{id} as v0.190.0 serves it: an unknown id or name is
// 404 "Snapshot with name X not found" (the access guard); a known name is
// 400 (ParseUUIDPipe); a snapshot that a live sandbox was made from is
// deleted all the same (200): removing, then gone, and the sandbox runs on
// while new creates from it are refused.
func TestDeleteSnapshotRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{StopDelay: time.Minute})
	snap, _ := srv.CreateSnapshot("base:1", "debian:12")
	sb := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID}, 200)
	id := sb["id"].(string)
	srv.Advance(time.Minute)
	gone := "8e7f1b63-5d2c-4b8e-9f5a-3c1d2e4f6a7b"
	if got := c.want("DELETE", "/snapshots/"+gone, nil, 404); got["message"] != "Snapshot with name "+gone+" not found" {
		t.Errorf("DELETE of an unknown id: %v", got["message"])
	}
	if got := c.want("DELETE", "/snapshots/base:1", nil, 400); got["message"] != "Validation failed (uuid is expected)" {
		t.Errorf("DELETE by name: %v", got["message"])
	}
	c.want("DELETE", "/snapshots/"+snap.ID, nil, 200)
	if got := c.want("GET", "/snapshots/"+snap.ID, nil, 200); got["state"] != "removing" {
		t.Errorf("after DELETE the snapshot is %v, want removing", got["state"])
	}
	if got := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID}, 400); got["message"] != "Snapshot "+snap.ID+" is removing" {
		t.Errorf("a create from a removing snapshot: %v", got["message"])
	}
	srv.Advance(30 * time.Second)
	c.want("DELETE", "/snapshots/"+snap.ID, nil, 200) // again while removing: its end does not move
	srv.Advance(30 * time.Second)
	if got := c.want("GET", "/snapshots/"+snap.ID, nil, 404); got["message"] != "Snapshot with name "+snap.ID+" not found" {
		t.Errorf("GET of the deleted snapshot: %v", got["message"])
	}
	c.want("DELETE", "/snapshots/"+snap.ID, nil, 404)
	if got := c.want("GET", "/sandbox/"+id, nil, 200); got["state"] != "started" {
		t.Errorf("the sandbox made from the deleted snapshot is %v, want started", got["state"])
	}
	c.want("POST", srv.ToolboxProxyURL()+"/"+id+"/process/execute", map[string]any{"command": "true"}, 200)
}

// GET /snapshots as v0.190.0 serves it: pages of limit (1-200) from page
// 1, a case-insensitive partial name match, the default order by last use
// (null here) falling to the newest first, sort by name either way, and
// 400 for values out of range.
func TestListSnapshotsPagesFiltersAndSorts(t *testing.T) {
	t.Parallel()
	srv, clk, c := newServer(t, daytonafake.Knobs{})
	for _, n := range []string{"tools-b", "Tools-a", "other"} {
		clk.Advance(time.Minute)
		if _, err := srv.CreateSnapshot(n, "debian:12"); err != nil {
			t.Fatal(err)
		}
	}
	names := func(page map[string]any) []string {
		var out []string
		for _, it := range page["items"].([]any) {
			out = append(out, it.(map[string]any)["name"].(string))
		}
		return out
	}
	got := c.want("GET", "/snapshots?name=TOOLS", nil, 200)
	if n := names(got); !slices.Equal(n, []string{"Tools-a", "tools-b"}) || got["total"] != float64(2) || got["totalPages"] != float64(1) {
		t.Errorf("name=TOOLS: %v (total %v, pages %v), want the two tools snapshots, newest first", n, got["total"], got["totalPages"])
	}
	got = c.want("GET", "/snapshots?name=tools&sort=name&order=asc&limit=1&page=2", nil, 200)
	if n := names(got); !slices.Equal(n, []string{"tools-b"}) || got["page"] != float64(2) || got["totalPages"] != float64(2) {
		t.Errorf("sorted by name, page 2 of 1 each: %v (page %v of %v)", n, got["page"], got["totalPages"])
	}
	if n := names(c.want("GET", "/snapshots?name=tools&limit=1&page=3", nil, 200)); len(n) != 0 {
		t.Errorf("a page past the end: %v, want none", n)
	}
	for q, msg := range map[string]string{
		"limit=201":  "limit must not be greater than 200",
		"limit=0":    "limit must not be less than 1",
		"page=0":     "page must not be less than 1",
		"sort=size":  "sort must be one of the following values: name, state, lastUsedAt, createdAt",
		"order=up":   "order must be one of the following values: asc, desc",
		"limit=many": "limit must be an integer number",
	} {
		if got := c.want("GET", "/snapshots?"+q, nil, 400); got["message"] != msg {
			t.Errorf("GET /snapshots?%s: %q, want %q", q, got["message"], msg)
		}
	}
}
