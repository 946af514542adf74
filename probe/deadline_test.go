package probe

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// A detection command that never finishes is cut by the detect stage's
// own deadline, not by the caller's context (which has none): the probe
// reports timeout naming the stage and the target, the later stages are
// skipped, and the lease is still released and confirmed (PRB-5).
func TestStageDeadlineWithoutCallerDeadline(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{fake: &fake.Options{Handlers: map[string]fake.HandlerFunc{
		qualify.DetectScript: func(ctx context.Context, _ fake.Invocation) (int, error) {
			<-ctx.Done()
			return -1, ctx.Err()
		},
	}}})
	w.prober = newProber(w.sources(), &options{stageTimeouts: stageTimeouts{Detect: 50 * time.Millisecond}})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "hangs", img.String())
	res := w.probe(t, env.ID, "acme")
	if res.OK || res.Code != reason.Timeout {
		t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
	}
	st, _ := stageOf(res, stageDetect)
	if st.OK || st.Code != reason.Timeout || !strings.Contains(st.Error, "stage detect") || !strings.Contains(st.Error, res.Target) {
		t.Errorf("detect stage %+v; want a timeout naming the stage and target %q", st, res.Target)
	}
	wantSkippedAfter(t, res, stageDetect)
	if c := res.Cleanup; c == nil || !c.Confirmed || c.LeaseStatus != lease.StatusReleased {
		t.Errorf("cleanup %+v", c)
	}
	for _, sb := range fakectl.Of(w.fake).Sandboxes() {
		if sb.State != drivers.StateDestroyed {
			t.Errorf("sandbox %s left %s", sb.ID, sb.State)
		}
	}
}

// sshProber is a prober over the ssh driver alone, with stage deadlines.
func sshProber(t *testing.T, st stageTimeouts) (*Prober, *environment.Catalog) {
	t.Helper()
	reg := drivers.NewRegistry(ssh.New(nil))
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	envs := envhook.NewMemoryStore().(environment.Store)
	cat := envhook.NewCatalog(envs, reg, secrets, nil, nil).(*environment.Catalog)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments)
	mgr, _ := leasehook.New(leasehook.Sources{Store: lease.NewMemoryStore(), Drivers: reg, Assignments: asg, Secrets: secrets.Get})
	leases := mgr.(*lease.Manager)
	return newProber(testSources(cat, envs, reg, leases, qualification.NewMemoryStore(), false), &options{stageTimeouts: st}), cat
}

// A TCP server that accepts and never speaks is a timeout, not an
// unreachable host, whichever deadline fires first: the driver's
// connect_timeout or the acquire stage's deadline (PRB-5). The result names
// the target by host, and its diagnostic says why nothing was recorded.
func TestSilentServerIsTimeout(t *testing.T) {
	t.Parallel()
	srv := testenv.SSHD(t) // for a valid key and known_hosts line only
	port := testenv.SilentListener(t)
	cfg := func(connectTimeout string) map[string]any {
		return map[string]any{
			"host": "127.0.0.1", "port": port, "user": "nobody",
			"private_key": srv.ClientKeyPEM(), "connect_timeout": connectTimeout,
			"known_hosts": []any{strings.Replace(srv.KnownHostsLine(), strconv.Itoa(srv.Port()), strconv.Itoa(port), 1)},
		}
	}
	target := "nobody@127.0.0.1:" + strconv.Itoa(port)
	for _, tc := range []struct {
		name           string
		connectTimeout string
		stages         stageTimeouts
	}{
		{"driver connect_timeout", "200ms", stageTimeouts{}},
		{"acquire stage deadline", "10m", stageTimeouts{Acquire: 200 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _ := sshProber(t, tc.stages)
			res, err := p.ProbeDraft(context.Background(), admin, "ssh", cfg(tc.connectTimeout), Request{})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || res.Code != reason.Timeout || res.Target != target {
				t.Fatalf("ok=%v code=%s target=%q: %s", res.OK, res.Code, res.Target, res.Summary)
			}
			if st, _ := stageOf(res, stageAcquire); st.Code != reason.Timeout || !strings.Contains(res.Summary, target) {
				t.Errorf("acquire stage %+v; summary %q", st, res.Summary)
			}
			wantSkippedAfter(t, res, stageAcquire)
		})
	}
}

// An SSH host that completes the handshake and the workspace check but
// never finishes the detection command cannot hang a probe: the detect
// stage's deadline ends it with timeout, and the release still ends the
// session with a confirmed receipt (PRB-5), against OpenSSH's sshd.
func TestSSHDetectionHangIsTimeout(t *testing.T) {
	t.Parallel()
	srv := testenv.SSHD(t)
	// The detection script is the only command that runs uname: it runs
	// as asked (under the driver's process-group wrapper), but its uname
	// never returns.
	hang := t.TempDir()
	if err := os.WriteFile(filepath.Join(hang, "uname"), []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv.ForceCommand(t, `case "$SSH_ORIGINAL_COMMAND" in
*uname*) PATH=`+hang+`:$PATH; export PATH ;;
esac
exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
`)
	p, cat := sshProber(t, stageTimeouts{Detect: 500 * time.Millisecond})
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := cat.Create(ctx, admin, environment.CreateRequest{Name: "silent-detect", Driver: "ssh", Config: map[string]any{
		"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": dir,
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Probe(ctx, admin, v.ID, Request{Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.Timeout {
		t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
	}
	if st, _ := stageOf(res, stageDetect); st.Code != reason.Timeout || !strings.Contains(st.Error, "stage detect") {
		t.Errorf("detect stage %+v", st)
	}
	if c := res.Cleanup; c == nil || !c.Confirmed {
		t.Errorf("cleanup %+v", c)
	}
	if diagCode(res) != qualify.HostTarget {
		t.Errorf("diagnostic %+v", res.QualificationDiagnostic)
	}
}

// A draft of an invalid SSH config is named by host, not "provider ssh"
// (issue: the target must be recognisable when validation fails).
func TestInvalidSSHDraftNamesHost(t *testing.T) {
	t.Parallel()
	p, _ := sshProber(t, stageTimeouts{})
	res, err := p.ProbeDraft(context.Background(), admin, "ssh", map[string]any{
		"host": "build-7.internal", "user": "ci", "private_key": "not a key",
	}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.InvalidConfig || res.Target != "ci@build-7.internal:22" || !strings.Contains(res.Summary, "ci@build-7.internal:22") {
		t.Fatalf("ok=%v code=%s target=%q: %s", res.OK, res.Code, res.Target, res.Summary)
	}
}
