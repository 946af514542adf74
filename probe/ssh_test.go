package probe

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// The ssh probe against a real sshd: strict host key, the verified remote
// cwd and the platform in one remote command (PRB-2); a mismatched host
// key fails with its stable code and never falls back (PRB-5, PRB-8).
func TestSSHProbe(t *testing.T) {
	t.Parallel()
	srv := testenv.SSHD(t)
	ctx := context.Background()
	sshDrv := ssh.New(nil)
	reg := drivers.NewRegistry(sshDrv)
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	envs := envhook.NewMemoryStore().(environment.Store)
	cat := envhook.NewCatalog(envs, reg, secrets, nil, nil).(*environment.Catalog)
	lstore := lease.NewMemoryStore()
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments)
	mgr, _ := leasehook.New(leasehook.Sources{Store: lstore, Drivers: reg, Assignments: asg, Secrets: secrets.Get})
	m := mgr.(*lease.Manager)
	p := newProber(testSources(cat, envs, reg, m, qualification.NewMemoryStore(), false), nil)

	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	create := func(name, knownHost string) string {
		v, err := cat.Create(ctx, admin, environment.CreateRequest{Name: name, Driver: "ssh", Config: map[string]any{
			"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
			"private_key": srv.ClientKeyPEM(), "known_hosts": []any{knownHost}, "workdir": dir,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return v.ID
	}
	target := srv.User() + "@" + srv.Host() + ":" + strconv.Itoa(srv.Port())

	t.Run("trusted host", func(t *testing.T) {
		id := create("box", srv.KnownHostsLine())
		res, err := p.Probe(ctx, admin, id, Request{Company: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if !res.OK {
			t.Fatalf("ssh probe failed: %s", res.Summary)
		}
		if res.Cwd != dir || res.Target != target || res.Platform.Arch == "" || res.Platform.OS != "linux" {
			t.Errorf("cwd %q (want %q), target %q (want %q), platform %q", res.Cwd, dir, res.Target, target, res.Platform)
		}
		t.Log(res.Summary)
		if res.Cleanup == nil || !res.Cleanup.Confirmed {
			t.Errorf("cleanup %+v", res.Cleanup)
		}
		for _, s := range []string{target, "trusted host key", dir} {
			if !strings.Contains(res.Summary, s) {
				t.Errorf("summary lacks %q: %q", s, res.Summary)
			}
		}
		if res.NotValidated != notValidatedNote || !strings.Contains(res.Message, target) {
			t.Errorf("not validated %q, message %q", res.NotValidated, res.Message)
		}
		if strings.Contains(res.Summary, "PRIVATE KEY") || strings.Contains(res.Summary, srv.ClientKeyPEM()) {
			t.Errorf("summary holds key material")
		}
	})
	t.Run("host key mismatch", func(t *testing.T) {
		id := create("impostor", srv.MismatchedKnownHostsLine())
		res, err := p.Probe(ctx, admin, id, Request{Company: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || res.Code != reason.HostKeyMismatch || res.Cwd != "" || !res.Platform.IsZero() {
			t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
		}
		if !strings.Contains(res.Summary, target) || !strings.Contains(res.Summary, "host_key_mismatch") {
			t.Errorf("summary %q", res.Summary)
		}
	})
}
