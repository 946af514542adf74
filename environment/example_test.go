package environment_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// An operator saves an environment with a pasted API key; the catalog keeps
// only a secret reference, a board member sees the redacted view, and an
// agent may not edit it.
func Example() {
	ctx := context.Background()
	cat := environment.NewCatalog(environment.NewMemoryStore(), newRegistry(), environment.NewMemorySecretStore(), nil,
		nil)

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
