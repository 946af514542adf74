package probe

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// Issue 23 item 2: the ssh probe measures what the server forwards for the
// runner (a forward opened and closed, nothing uploaded): unix on OpenSSH,
// tcp on Dropbear, none on Dropbear with remote forwarding off. A config
// that records "none" narrows runner_ingress away (CAP-2), so the gate
// refuses a run that needs the runner before anything is allocated.
func TestSSHProbeMeasuresForwarding(t *testing.T) {
	servers := map[string]func(t *testing.T) *testenv.SSHServer{
		"unix": func(t *testing.T) *testenv.SSHServer { return testenv.SSHD(t) },
		"tcp":  func(t *testing.T) *testenv.SSHServer { return testenv.Dropbear(t) },
		"none": func(t *testing.T) *testenv.SSHServer { return testenv.Dropbear(t, "-k") },
	}
	for _, want := range []string{"unix", "tcp", "none"} {
		t.Run(want, func(t *testing.T) {
			srv := servers[want](t)
			ctx := context.Background()
			sshDrv := ssh.New(nil)
			reg := drivers.NewRegistry(sshDrv)
			secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
			envs := envhook.NewMemoryStore().(environment.Store)
			cat := envhook.NewCatalog(envs, reg, secrets, nil, nil).(*environment.Catalog)
			asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments)
			mgr, _ := leasehook.New(leasehook.Sources{Store: lease.NewMemoryStore(), Drivers: reg, Assignments: asg, Secrets: secrets.Get})
			m := mgr.(*lease.Manager)
			p := newProber(testSources(cat, envs, reg, m, qualification.NewMemoryStore(), false), nil)
			cfg := map[string]any{
				"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
				"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir(),
			}
			v, err := cat.Create(ctx, admin, environment.CreateRequest{Name: "box", Driver: "ssh", Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Probe(ctx, admin, v.ID, Request{Company: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			if !res.OK || res.Forwarding != want {
				t.Fatalf("probe OK %v, forwarding %q, want %q: %s", res.OK, res.Forwarding, want, res.Summary)
			}
			if res.Cleanup == nil || !res.Cleanup.Confirmed {
				t.Errorf("cleanup %+v", res.Cleanup)
			}
			if want == "none" {
				// probe --runner on that server: unsupported, never internal.
				signer, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("k", 32))})
				if err != nil {
					t.Fatal(err)
				}
				lstore := lease.NewMemoryStore()
				c, tasks, err := controller.New(signer, lstore, nil, &controller.Options{Store: controller.NewMemoryStore(), DataDir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				bin := testenv.RunnerBinary(t)
				mgr, _ := leasehook.New(leasehook.Sources{Store: lstore, Drivers: reg, Assignments: asg, Tasks: tasks, Secrets: secrets.Get})
				leases := mgr.(*lease.Manager)
				rp := newProber(testSources(cat, envs, reg, leases, qualification.NewMemoryStore(), false), &options{runner: &runnerProbe{controller: c,
					runners: func() (*drivers.RunnerSet, error) { return controller.RunnerSetFromFiles(bin) }}})
				rres, err := rp.Probe(ctx, admin, v.ID, Request{Company: "acme", Runner: true})
				if err != nil {
					t.Fatal(err)
				}
				if rres.OK || rres.Code != reason.Unsupported {
					t.Errorf("probe --runner: ok %v code %s (%s), want unsupported", rres.OK, rres.Code, rres.Summary)
				}
			}
			// The measured fact saved as the config's forwarding knob.
			cfg["forwarding"] = res.Forwarding
			env := &environment.Environment{ID: "env_1", Name: "box", Driver: "ssh", Status: environment.StatusActive, Config: cfg}
			_, eff, err := envhook.Check(envhook.NewGate(reg, nil), ctx, env, drivers.NewSet(drivers.CapExec, drivers.CapRunnerIngress))
			var ue *environment.Error
			switch {
			case want != "none" && (err != nil || !eff.Has(drivers.CapRunnerIngress)):
				t.Errorf("gate: effective %s, %v; want runner_ingress", eff, err)
			case want == "none" && (!errors.As(err, &ue) || !slices.Equal(ue.Missing, []drivers.Capability{drivers.CapRunnerIngress})):
				t.Errorf("gate: %v, want an *environment.Error missing runner_ingress", err)
			}
		})
	}
}
