package environment_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// An operator saves an environment with a pasted API key; the catalog keeps
// only a secret reference, a board member sees the redacted view, and an
// agent may not edit it.
func Example() {
	ctx := context.Background()
	// A host gets the catalog from berth.New (memory stores here).
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{&testDriver{name: "remote", schema: remoteSchema("remote")}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	cat := sys.Catalog()

	req, err := environment.DecodeCreateRequest([]byte(`{
		"name": "build box",
		"driver": "remote",
		"config": {"host": "build-1.example", "apiKey": "pasted-secret"}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	op := authz.Principal{ID: "u_1", Role: authz.RoleLocalOperator}
	v, err := cat.Create(ctx, op, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, _ := v.Config.SecretRef("apiKey")
	fmt.Println("saved", v.ID[:4]+"…", "revision", v.Revision, "apiKey stored as a reference:", ref.Version == 1)

	board := authz.Principal{ID: "u_2", Role: authz.RoleBoardMember}
	rv, _ := cat.Get(ctx, board, v.ID)
	out, _ := json.Marshal(map[string]any{"name": rv.Name, "driver": rv.Driver, "redacted": rv.Redacted, "config": rv.Config})
	fmt.Println(string(out))

	agent := authz.Principal{ID: "agent_7", Role: authz.RoleAgent, Companies: []string{"acme"}}
	_, err = cat.Archive(ctx, agent, v.ID, v.Revision)
	fmt.Println(errors.Is(err, errcode.ErrDenied), strings.ReplaceAll(err.Error(), v.ID, "ID"))

	_, err = environment.DecodeCreateRequest([]byte(`{"name": "x", "driver": "remote", "qualification": {"ok": true}}`))
	fmt.Println(err)
	// Output:
	// saved env_… revision 1 apiKey stored as a reference: true
	// {"config":null,"driver":"remote","name":"build box","redacted":true}
	// true agent "agent_7" may not archive environment "build box" (ID): permission denied
	// environment: field "qualification": reserved server-owned field; it cannot be set by a request (CFG-5)
}

// A host binds a project to a sandbox environment and the instance to this
// host; resolution takes the strongest binding and never falls back.
func ExampleAssignments_Resolve() {
	ctx := context.Background()
	// A host gets the catalog and the assignments from berth.New.
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fake.New(nil), local.New(nil)}, TestMode: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	cat, asg := sys.Catalog(), sys.Assignments()
	op := authz.Principal{ID: "u_1", Role: authz.RoleLocalOperator}
	sandbox, _ := cat.Create(ctx, op, environment.CreateRequest{Name: "sandboxes", Driver: "fake"})
	host, _ := cat.Create(ctx, op, environment.CreateRequest{Name: "this host", Driver: "local"})

	_, _ = asg.Set(ctx, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingInstanceDefault}, EnvironmentID: host.ID}, 0)
	_, _ = asg.Set(ctx, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingProject, Key: "p_1", Company: "acme"}, EnvironmentID: sandbox.ID}, 0)

	res, _ := asg.Resolve(ctx, op, authz.Scope{Company: "acme", Project: "p_1"}, drivers.NewSet(drivers.CapReuse))
	fmt.Println(res.Binding.String(), "->", res.Environment.Name)
	res, _ = asg.Resolve(ctx, op, authz.Scope{Company: "acme", Project: "p_2"}, 0)
	fmt.Println(res.Binding.String(), "->", res.Environment.Name)

	// The bound host cannot resume sandboxes: an error, not another target.
	_, err = asg.Resolve(ctx, op, authz.Scope{Company: "acme", Project: "p_2"}, drivers.NewSet(drivers.CapReuse))
	fmt.Println(errors.Is(err, drivers.ErrUnsupported))

	// Deleting the sandbox environment clears its binding (ASG-5).
	b, _ := cat.Delete(ctx, op, sandbox.ID, sandbox.Revision)
	fmt.Println("cleared:", b.Assignments[0].ID)
	res, _ = asg.Resolve(ctx, op, authz.Scope{Company: "acme", Project: "p_1"}, 0)
	fmt.Println(res.Binding.String(), "->", res.Environment.Name)
	// Output:
	// project p_1 binding of company "acme" -> sandboxes
	// instance default binding -> this host
	// true
	// cleared: project:p_1
	// instance default binding -> this host
}
