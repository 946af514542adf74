// Package authz holds berth's authorization vocabulary: who acts
// (Principal, with a Role and company grants), what they want to do
// (Action), on what (Resource, with the Scope a lease was chosen
// through), and who decides (Authorizer; DefaultPolicy is berth's own).
//
//	sys, _ := berth.New(ctx, &berth.Options{Authorizer: myPolicy})
//	agent := authz.Principal{ID: "agent-7", Role: authz.RoleAgent, Companies: []string{"acme"}}
//	_, err := catalog.Get(ctx, agent, id) // an environment.Catalog of sys
//	if errors.Is(err, errcode.ErrDenied) { ... }
//
// Guarantees:
//
//   - Authorization is decided in the library (AUTH-1): every service
//     method that acts for someone takes a Principal and asks the
//     Authorizer before it reads or changes anything.
//   - A refusal wraps errcode.ErrDenied and names the principal's role and id, the
//     action and the resource (Denied); it never holds config or secrets.
//   - A record the principal may not read is reported as not found, exactly
//     as a missing one; errcode.ErrDenied is for actions on records it can see.
//   - DefaultPolicy implements CFG-2, PRB-7, ASG-3 and AUTH-2's use of
//     managed accounts; an unknown role or action is denied.
//
// The package is on floor 0: it imports only the standard library, so
// every berth package can use it.
package authz
