package probe_test

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/qualification"
)

// Probing a saved environment whose image is pinned by digest records a
// qualification for the company.
func ExampleProber_Probe() {
	ctx := context.Background()
	fk := fake.New(nil)
	img := fk.AddImage("registry.fake.test/team/app:v1") // push a tag; pin its digest
	reg := drivers.NewRegistry(fk)
	secrets := environment.NewMemorySecretStore()
	envs := environment.NewMemoryStore()
	cat := environment.NewCatalog(envs, reg, secrets, nil, &environment.Options{TestMode: true})
	asg := environment.NewAssignments(environment.NewMemoryBindingStore(), envs, reg, &environment.Options{TestMode: true})
	leases, _ := lease.NewManager(lease.NewMemoryStore(), reg, asg, nil, &lease.Options{Secrets: secrets.Get})
	p := probe.New(probe.Sources{Catalog: cat, Environments: envs, Drivers: reg, Leases: leases,
		Qualifications: qualification.NewMemoryStore(),
		Gate:           environment.NewGate(reg, &environment.Options{TestMode: true})}, nil)

	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	env, err := cat.Create(ctx, admin, environment.CreateRequest{
		Name: "pinned", Driver: "fake", Config: map[string]any{"image": img.String()},
	})
	if err != nil {
		panic(err)
	}
	res, err := p.Probe(ctx, admin, env.ID, probe.Request{Company: "acme"})
	if err != nil {
		panic(err)
	}
	fmt.Println("ok:", res.OK, res.Code)
	for _, s := range res.Stages {
		fmt.Println(s.Name, s.OK)
	}
	fmt.Println("platform:", res.Platform)
	fmt.Println("cleanup confirmed:", res.Cleanup.Confirmed)
	fmt.Println("recorded:", res.PlatformQualificationRecorded, res.QualificationDiagnostic.Code)
	// Output:
	// ok: true ok
	// resolve true
	// acquire true
	// detect true
	// image true
	// release true
	// qualify true
	// platform: linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12
	// cleanup confirmed: true
	// recorded: true recorded
}
