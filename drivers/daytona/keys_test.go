package daytona_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/reason"
)

// assertNoKey fails the test when the driver's log holds the API key
// (CFG-3). Tests that need the log to be non-empty check that themselves.
func assertNoKey(t testing.TB, e *env) {
	t.Helper()
	if strings.Contains(e.log.String(), e.srv.APIKey()) {
		t.Errorf("the driver's log contains the API key")
	}
}

// CFG-3: the API key never appears in errors or logs, even when the
// provider echoes it; errors name the API host and the object.
func TestAPIKeyNeverInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	host := strings.TrimPrefix(strings.TrimSuffix(e.srv.URL(), "/api"), "http://")

	// A refused key.
	wrong := e.config(t, e.snap.ID)
	wrong["api_key"] = "dtn_wrong_key_0123456789abcdef"
	_, err := e.drv.Acquire(ctx, wrong, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrAuth) || reason.Of(err) != reason.AuthFailed {
		t.Errorf("Acquire with a wrong key: err = %v, want ErrAuth", err)
	}
	if err != nil && (strings.Contains(err.Error(), "dtn_wrong_key") || !strings.Contains(err.Error(), host)) {
		t.Errorf("error %q shows the key or does not name the host %s", err, host)
	}

	// A provider that echoes the key in its message.
	cfg := e.config(t, e.snap.ID)
	e.srv.InjectFault(daytonafake.Fault{Route: daytonafake.RouteGetSnapshot, Status: 400,
		Message: "bad token " + e.srv.APIKey()})
	_, err = e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err == nil || strings.Contains(err.Error(), e.srv.APIKey()) || !strings.Contains(err.Error(), config.Redacted) {
		t.Errorf("error %v: want the echoed key redacted", err)
	}
	if err != nil && !strings.Contains(err.Error(), e.snap.ID) {
		t.Errorf("error %q does not name the snapshot", err)
	}

	// A whole lease: acquire, exec, release.
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lease-key"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	ds, _ := drivers.DriverAs[drivers.Destroyer](e.drv)
	r, _ := drivers.DriverAs[drivers.Resumer](e.drv)
	_, err = r.Resume(ctx, cfg, sb.ID())
	if !errors.Is(err, errcode.ErrNotFound) || !strings.Contains(err.Error(), sb.ID()) || !strings.Contains(err.Error(), host) {
		t.Errorf("Resume of a deleted sandbox: %v; want ErrNotFound naming %s and %s", err, sb.ID(), host)
	}
	if _, err := ds.Destroy(ctx, cfg, sb.ID()); err != nil {
		t.Errorf("Destroy of a deleted sandbox: %v", err)
	}
	if e.log.String() == "" {
		t.Fatalf("the driver logged nothing; the check below would be empty")
	}
	assertNoKey(t, e)
}

// The fake rejects unknown JSON fields, so a driver that passes its tests
// uses the API's field names; and what the driver sends arrives.
func TestRequestBodiesUseTheAPIFieldNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The fake's strictness, so that the check can fail.
	for _, tc := range []struct{ url, body string }{
		{e.srv.URL() + "/sandbox", `{"snapshotId":"` + e.snap.ID + `"}`},
		{e.srv.URL() + "/sandbox", `{"snapshot":"` + e.snap.ID + `","auto_stop_interval":5}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tc.url, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+e.srv.APIKey())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s %s: status %d, want 400", tc.url, tc.body, resp.StatusCode)
		}
	}

	cfg := e.config(t, e.snap.ID)
	cfg[daytona.FieldAutoArchiveInterval] = int64(60)
	cfg[daytona.FieldAutoDeleteInterval] = int64(-1)
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lease-fields", Labels: map[string]string{"berth.io/instance": "i1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(ctx, drivers.Destroy)
	v, _ := e.srv.Sandbox(sb.ID())
	wantLabels := map[string]string{"test/suite": "daytona", "berth.io/instance": "i1", daytona.LabelLeaseID: "lease-fields"}
	if diff := cmp.Diff(wantLabels, v.Labels); diff != "" {
		t.Errorf("labels at the provider (-want +got):\n%s", diff)
	}
	if len(v.Env) != 0 {
		t.Errorf("env at the provider = %v, want none: the config's env is secret and goes with each command", v.Env)
	}
	if v.AutoDeleteInterval != -1 {
		t.Errorf("autoDeleteInterval at the provider = %d, want -1", v.AutoDeleteInterval)
	}
	cmd := drivers.Command{Argv: []string{"sh", "-c", `echo "$BERTH_SANDBOX $EXTRA"; pwd`}, Env: map[string]string{"EXTRA": "yes"}, Dir: "/"}
	res, err := sb.Exec(ctx, cmd)
	if err != nil || string(res.Stdout) != "1 yes\n/\n" {
		t.Errorf("Exec with envs and cwd: %v, %q", err, res.Stdout)
	}
}
