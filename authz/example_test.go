package authz_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
)

// DefaultPolicy is berth's own Authorizer: operators may do everything,
// agents read the redacted view and lease only through a binding's scope of
// a company they hold a grant for. A refusal wraps errcode.ErrDenied and names the
// role, the principal, the action and the resource.
func ExampleDefaultPolicy() {
	ctx := context.Background()
	var policy authz.DefaultPolicy
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	env := authz.Resource{Kind: authz.ResourceKindEnvironment, ID: "env_1", Name: "builders", Driver: "docker"}

	fmt.Println(policy.Authorize(ctx, operator, authz.ActionUpdate, env))
	fmt.Println(policy.Authorize(ctx, agent, authz.ActionRead, env))
	err := policy.Authorize(ctx, agent, authz.ActionUpdate, env)
	fmt.Println(errors.Is(err, errcode.ErrDenied), err)

	// Agents lease through a scope, never by environment id.
	byScope := env
	byScope.Company = "acme"
	byScope.Scope = &authz.Scope{Company: "acme", Workspace: "ws"}
	fmt.Println(policy.Authorize(ctx, agent, authz.ActionLease, byScope))
	byID := env
	byID.Company = "acme"
	fmt.Println(errors.Is(policy.Authorize(ctx, agent, authz.ActionLease, byID), errcode.ErrDenied))
	// Output:
	// <nil>
	// <nil>
	// true agent "bot" may not update environment "builders" (env_1): permission denied
	// <nil>
	// true
}

// A host narrows berth's policy with what only it knows: here, which
// workspaces an agent works in. It hands the result to berth.Options.Authorizer;
// every service then asks it before acting.
func ExampleAuthorizerFunc() {
	ctx := context.Background()
	workspaces := map[string][]string{"bot": {"ws-1"}} // the host's own records
	policy := authz.AuthorizerFunc(func(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
		if p.Role == authz.RoleAgent && a == authz.ActionLease && r.Scope != nil &&
			!slices.Contains(workspaces[p.ID], r.Scope.Workspace) {
			return authz.Denied(p, a, r)
		}
		return authz.DefaultPolicy{}.Authorize(ctx, p, a, r)
	})

	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	for _, ws := range []string{"ws-1", "ws-2"} {
		scope := &authz.Scope{Company: "acme", Workspace: ws}
		r := authz.Resource{Kind: authz.ResourceKindEnvironment, ID: "env_1", Name: "builders", Company: "acme", Scope: scope}
		fmt.Println(ws, policy.Authorize(ctx, agent, authz.ActionLease, r))
	}
	// Output:
	// ws-1 <nil>
	// ws-2 agent "bot" may not lease environment "builders" (env_1) of company "acme" through the binding of company "acme" (workspace ws-2): permission denied
}
