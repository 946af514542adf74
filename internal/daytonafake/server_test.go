package daytonafake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/daytonafake"
)

// client speaks raw HTTP to the fake.
type client struct {
	t   *testing.T
	srv *daytonafake.Server
	key string
}

func newServer(t *testing.T, knobs daytonafake.Knobs) (*daytonafake.Server, *clock.Fake, *client) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv, err := daytonafake.New(&daytonafake.Options{Clock: clk, Knobs: knobs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, clk, &client{t: t, srv: srv, key: srv.APIKey()}
}

// do sends body (nil for none) to the API path (or an absolute URL) and
// returns the status and the decoded JSON answer.
func (c *client) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	u := path
	if !strings.HasPrefix(path, "http") {
		u = c.srv.URL() + path
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, u, rd)
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (c *client) want(method, path string, body any, status int) map[string]any {
	c.t.Helper()
	got, out := c.do(method, path, body)
	if got != status {
		c.t.Fatalf("%s %s: status %d (%v), want %d", method, path, got, out["message"], status)
	}
	return out
}

func TestAuth(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{})
	c.key = "wrong"
	out := c.want("GET", "/sandbox", nil, 401)
	if out["statusCode"] != float64(401) || out["message"] == "" {
		t.Errorf("401 body %v, want the API's error shape", out)
	}
	c.key = ""
	c.want("POST", srv.ToolboxProxyURL()+"/x/process/execute", `{"command":"true"}`, 401)
}

// The sandbox state machine: create answers before started; stop only from
// started; start from stopped or archived; archive only from stopped; 409
// while a change is pending; soft delete then 404.
func TestSandboxStateMachine(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{StartDelay: time.Minute, StopDelay: time.Minute})
	snap, err := srv.CreateSnapshot("base:1", "debian:12")
	if err != nil {
		t.Fatal(err)
	}
	sb := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID, "name": "one"}, 200)
	id, _ := sb["id"].(string)
	if uuid.Validate(id) != nil || sb["state"] != "creating" || sb["desiredState"] != "started" || sb["snapshot"] != snap.Name {
		t.Fatalf("create answered %v, want a UUID creating towards started from %s", sb, snap.Name)
	}
	c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID, "name": "one"}, 409) // names are unique
	c.want("POST", "/sandbox/"+id+"/stop", nil, 409)                                    // change pending
	c.want("DELETE", "/sandbox/"+id, nil, 409)
	srv.Advance(time.Minute)
	if got := c.want("GET", "/sandbox/one", nil, 200); got["state"] != "started" || got["id"] != id {
		t.Fatalf("by name after the delay: %v", got)
	}
	c.want("POST", "/sandbox/"+id+"/start", nil, 200) // already started: no-op
	c.want("POST", "/sandbox/"+id+"/archive", nil, 400)
	c.want("POST", "/sandbox/"+id+"/stop", nil, 200)
	c.want("POST", "/sandbox/"+id+"/start", nil, 409) // stopping
	srv.Advance(time.Minute)
	c.want("POST", "/sandbox/"+id+"/stop", nil, 400) // not stoppable
	c.want("POST", "/sandbox/"+id+"/archive", nil, 200)
	srv.Advance(time.Minute)
	if got := c.want("POST", "/sandbox/"+id+"/start", nil, 200); got["state"] != "archived" || got["desiredState"] != "started" {
		t.Errorf("start of an archived sandbox answered %v/%v, want archived towards started", got["state"], got["desiredState"])
	}
	if got := c.want("GET", "/sandbox/"+id, nil, 200); got["state"] != "restoring" {
		t.Errorf("read after the start of an archived sandbox: %v, want restoring", got["state"])
	}
	srv.Advance(time.Minute)
	del := c.want("DELETE", "/sandbox/"+id, nil, 200)
	if del["desiredState"] != "destroyed" {
		t.Errorf("delete answered %v", del)
	}
	c.want("GET", "/sandbox/"+id, nil, 200) // soft: still there
	c.want("DELETE", "/sandbox/"+id, nil, 409)
	srv.Advance(time.Minute)
	c.want("GET", "/sandbox/"+id, nil, 404)
	c.want("GET", "/sandbox/one", nil, 404)
	c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID, "name": "one"}, 200) // the name is free again
}

func TestCreateRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{})
	snap, err := srv.CreateSnapshot("base:1", "debian:12")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body any
		want int
	}{
		{"unknown field", map[string]any{"snapshot": snap.ID, "snapshotId": snap.ID}, 400},
		{"resources with a snapshot", map[string]any{"snapshot": snap.ID, "cpu": 2}, 400},
		{"unknown snapshot", map[string]any{"snapshot": uuid.NewString()}, 400},
		{"by name", map[string]any{"snapshot": snap.Name}, 200},
		{"by id", map[string]any{"snapshot": snap.ID, "labels": map[string]string{"a": "b"}, "autoDeleteInterval": 0}, 200},
		{"malformed JSON", `{"snapshot":`, 400},
	} {
		if got, out := c.do("POST", "/sandbox", tc.body); got != tc.want {
			t.Errorf("%s: status %d (%v), want %d", tc.name, got, out["message"], tc.want)
		}
	}
}

func TestSnapshotRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{})
	for _, tc := range []struct {
		name, image string
		want        int
	}{
		{"a", "debian:12", 200},
		{"b", "debian", 400},        // no tag
		{"c", "debian:latest", 400}, // :latest
		{"d", "debian@sha256:" + strings.Repeat("a", 64), 200},
		{"e", "debian@sha256:abc", 400},
		{"a", "debian:13", 409}, // duplicate name
	} {
		out := c.want("POST", "/snapshots", map[string]any{"name": tc.name, "imageName": tc.image}, tc.want)
		if tc.want == 200 && uuid.Validate(out["id"].(string)) != nil {
			t.Errorf("snapshot id %v is not a UUID", out["id"])
		}
	}
	got := c.want("GET", "/snapshots/a", nil, 200) // by name
	id := got["id"].(string)
	c.want("GET", "/snapshots/"+id, nil, 200) // by id
	c.want("DELETE", "/snapshots/"+id, nil, 200)
	c.want("GET", "/snapshots/"+id, nil, 404)
	c.want("DELETE", "/snapshots/"+id, nil, 404)
	if _, err := srv.CreateSnapshot("a", "debian:13"); err != nil {
		t.Errorf("the name of a deleted snapshot is free again: %v", err)
	}
}

// Execute: 400 on an empty command or unknown fields, 408 when the timeout
// kills the command, stdout and stderr combined.
func TestExecute(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{})
	snap, _ := srv.CreateSnapshot("base:1", "debian:12")
	sb := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID}, 200)
	exec := srv.ToolboxProxyURL() + "/" + sb["id"].(string) + "/process/execute"
	c.want("POST", exec, map[string]any{"command": "  "}, 400)
	c.want("POST", exec, map[string]any{"command": "true", "env": map[string]string{}}, 400)
	c.want("POST", exec, map[string]any{"command": "true", "envs": map[string]string{"1BAD": "x"}}, 400)
	out := c.want("POST", exec, map[string]any{"command": "echo out; echo err >&2; echo $V; exit 3", "envs": map[string]string{"V": "v"}}, 200)
	if out["exitCode"] != float64(3) || out["result"] != "out\nerr\nv\n" {
		t.Errorf("execute answered %v", out)
	}
	out = c.want("POST", exec, map[string]any{"command": "sleep 30", "timeout": 1}, 408)
	if out["code"] != "REQUEST_TIMEOUT" {
		t.Errorf("408 body %v", out)
	}
	c.want("POST", "/sandbox/"+sb["id"].(string)+"/stop", nil, 200)
	srv.Advance(time.Second)
	c.want("POST", exec, map[string]any{"command": "true"}, 400) // not started
}

// List: labels filter and cursor pages.
func TestListPages(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{})
	snap, _ := srv.CreateSnapshot("base:1", "debian:12")
	for i := range 5 {
		labels := map[string]string{"run": "x"}
		if i == 0 {
			labels["run"] = "y"
		}
		c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID, "labels": labels}, 200)
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 1; ; pages++ {
		path := `/sandbox?limit=2&labels={"run":"x"}`
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		out := c.want("GET", path, nil, 200)
		for _, it := range out["items"].([]any) {
			seen[it.(map[string]any)["id"].(string)] = true
		}
		next, _ := out["nextCursor"].(string)
		if next == "" {
			if pages != 2 || len(seen) != 4 {
				t.Errorf("%d pages, %d sandboxes; want 2 pages of 4 sandboxes", pages, len(seen))
			}
			break
		}
		cursor = next
	}
	c.want("GET", "/sandbox?cursor=bogus", nil, 400)
	c.want("GET", "/sandbox?labels=notjson", nil, 400)
}

func TestFaults(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{})
	srv.InjectFault(daytonafake.Fault{Route: daytonafake.RouteListSandboxes, Nth: 2, Count: 2, Status: 429, RetryAfter: "3"})
	got := []int{}
	for range 4 {
		s, _ := c.do("GET", "/sandbox", nil)
		got = append(got, s)
	}
	if want := []int{200, 429, 429, 200}; !slices.Equal(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
	if n := srv.Calls(daytonafake.RouteListSandboxes); n != 4 {
		t.Errorf("Calls = %d, want 4", n)
	}
}

func TestPtyRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonafake.Knobs{})
	snap, _ := srv.CreateSnapshot("base:1", "debian:12")
	sb := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID}, 200)
	base := srv.ToolboxProxyURL() + "/" + sb["id"].(string) + "/process/pty"
	c.want("POST", base, map[string]any{"cols": 80}, 400)                 // id required
	c.want("POST", base, map[string]any{"id": "p", "cols": 1001}, 400)    // too wide (1000 is accepted)
	c.want("POST", base, map[string]any{"id": "p", "command": "sh"}, 400) // unknown field
	c.want("POST", base, map[string]any{"id": "p", "cols": 80, "rows": 24}, 201)
	c.want("POST", base, map[string]any{"id": "p"}, 409)
	if info := c.want("GET", base+"/p", nil, 200); info["active"] != true || info["cols"] != float64(80) {
		t.Errorf("session info %v", info)
	}
	c.want("POST", base+"/p/resize", map[string]any{"cols": 1000, "rows": 1000}, 200)
	c.want("POST", base+"/p/resize", map[string]any{"cols": 1001, "rows": 30}, 400)
	c.want("DELETE", base+"/p", nil, 200)
	if got := c.want("GET", base+"/p", nil, 404); got["error"] != "PTY session not found" {
		t.Errorf("PTY error body %v, want {\"error\": ...} as the daemon's PTY controller answers", got)
	}
}
