package probe_test

import (
	"context"
	"fmt"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/probe"
)

// Probing a saved environment whose image is pinned by digest records a
// qualification for the company.
func ExampleProber_Probe() {
	ctx := context.Background()
	fk := fake.New(nil)
	img := fk.AddImage("registry.fake.test/team/app:v1") // push a tag; pin its digest
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fk}, TestMode: true})
	if err != nil {
		panic(err)
	}
	defer sys.Close()
	p := sys.Prober()

	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	env, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{
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
	// isolation true
	// image true
	// release true
	// qualify true
	// platform: linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12
	// cleanup confirmed: true
	// recorded: true recorded
}
