package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/berthdev/berth/errcode"
)

// Role is the kind of principal acting on the catalog.
type Role string

// The roles the default policy knows. A host may use others with its own
// Authorizer; DefaultPolicy denies every role it does not know.
const (
	// RoleInstanceAdmin administers the whole installation.
	RoleInstanceAdmin Role = "instance_admin"
	// RoleLocalOperator operates the installation from the machine it runs
	// on (the host decides who that is); same powers as an instance admin.
	RoleLocalOperator Role = "local_operator"
	// RoleBoardMember is a (non-admin) member of a company's board: may read
	// redacted views only.
	RoleBoardMember Role = "board_member"
	// RoleAgent is an AI agent acting through the host.
	RoleAgent Role = "agent"
)

// Principal is who performs an action. Companies lists the companies the
// principal has grants for; environments are instance-scoped, so grants never
// widen catalog rights in DefaultPolicy (CFG-2), they only matter for
// company-bound resources such as leases (ASG-3).
type Principal struct {
	ID        string   `json:"id"`
	Role      Role     `json:"role"`
	Companies []string `json:"companies,omitempty"`
}

// String returns "ROLE ID" (or "unknown principal ID" without a role); it
// holds no grant details and no secret.
func (p Principal) String() string {
	role := string(p.Role)
	if role == "" {
		role = "unknown principal"
	}
	if p.ID == "" {
		return role
	}
	return fmt.Sprintf("%s %q", role, p.ID)
}

// InstanceCompany is the company value of records that belong to the
// instance rather than to a tenant: the leases of custom-image setup
// sandboxes and of warm-pool members not adopted yet (environments, and so
// their images, are instance-scoped). It is never a tenant's: HasCompany
// is false for it whatever the principal's grants say, so no agent or
// board member acts on such a record through a grant, while
// DefaultPolicy lets every known role read it.
const InstanceCompany = "berth:instance"

// HasCompany reports whether p holds a grant for company. It is false for
// "" and for InstanceCompany, which no grant covers.
func (p Principal) HasCompany(company string) bool {
	return company != "" && company != InstanceCompany && slices.Contains(p.Companies, company)
}

// Action is what a principal wants to do with a resource.
type Action string

// The actions berth authorizes. Mutations are Create, Update, Archive,
// Delete, Bind and Setup.
const (
	// ActionRead: read the redacted view of an environment (or list them).
	ActionRead Action = "read"
	// ActionReadConfig: read the full view (config with secret references,
	// env vars, metadata). Never grants secret values.
	ActionReadConfig Action = "read_config"
	// ActionCreate: save a new environment.
	ActionCreate Action = "create"
	// ActionUpdate: change a saved environment's name, description, config,
	// env vars or metadata.
	ActionUpdate Action = "update"
	// ActionArchive covers archiving and restoring.
	ActionArchive Action = "archive"
	// ActionDelete covers deleting and reading the blast radius (CFG-7).
	ActionDelete Action = "delete"
	// ActionProbe: run a probe of a saved or draft target (PRB-7).
	ActionProbe Action = "probe"
	// ActionLease: acquire a lease of an environment for a run.
	ActionLease Action = "lease"
	// ActionBind: create, change or clear an assignment binding.
	ActionBind Action = "bind"
	// ActionSetup: run a custom-image setup session (capture, promote,
	// rollback, revoke).
	ActionSetup Action = "setup"
	// ActionSweep: sweep the lease store (expire leases, retry cleanups,
	// destroy orphans). An operator action: it destroys sandboxes of every
	// company.
	ActionSweep Action = "sweep"
	// ActionAuthCheck: prepare, record, read or clear a project auth check
	// of a managed account (AUTH-2; Resource kind
	// ResourceKindManagedAccount with the company). An operator action.
	ActionAuthCheck Action = "auth_check"
	// ActionUseAccount: hand a managed account into a sandbox with a task
	// (AUTH-2; Resource kind ResourceKindManagedAccount, ID the account
	// reference, Company the lease's company). Allowing it is not enough:
	// a project auth check must match exactly too.
	ActionUseAccount Action = "use_account"
	// ActionReadHost: have berth read a path or repository with the host's
	// own identity into a lease's sandbox (a workspace's directory source,
	// a Git source the host's git fetches; Resource kind
	// ResourceKindLease, Name the source's location). An operator action
	// by default: it reads what the berth process can read. A host that
	// lets agents name their project allows it for the locations it
	// trusts.
	ActionReadHost Action = "read_host"
)

// IsMutation reports whether a changes stored state of the catalog or what
// runs on a target (everything but read, read_config, probe, lease,
// use_account and read_host).
func (a Action) IsMutation() bool {
	switch a {
	case ActionRead, ActionReadConfig, ActionProbe, ActionLease, ActionUseAccount, ActionReadHost:
		return false
	}
	return true
}

// The Resource kinds of berth's own requests.
const (
	// ResourceKindEnvironment is the Resource.Kind of catalog environments.
	ResourceKindEnvironment = "environment"
	// ResourceKindLease is the Resource.Kind of lease records (releasing
	// or reading a lease; Company is the lease's company).
	ResourceKindLease = "lease"
	// ResourceKindManagedAccount is the Resource.Kind of managed accounts
	// and their project auth checks (AUTH-2): ID is the account reference
	// (never its value), Company the company it is used for.
	ResourceKindManagedAccount = "managed_account"
	// ResourceKindBinding is the Resource.Kind of assignment bindings in
	// requests that are about a binding rather than one environment
	// (reading bindings, clearing one; Company is the binding's).
	ResourceKindBinding = "binding"
	// ResourceKindInstanceSettings is the Resource.Kind of the instance
	// settings (CFG-9, package instance): ActionRead reads them,
	// ActionUpdate changes them. They are instance-wide (Company "").
	ResourceKindInstanceSettings = "instance_settings"
	// ResourceKindTemplate is the Resource.Kind of captured templates
	// (package templates; ID the template's, Name its environment's id):
	// operators capture, promote, roll back and revoke (ActionSetup),
	// board members read them without provider internals, agents nothing.
	ResourceKindTemplate = "template"
)

// Resource describes what an action is about. Fields that are unknown (an
// environment not yet created has no ID; a listing has neither ID nor Name)
// are empty. It never holds config or secrets.
type Resource struct {
	Kind   string `json:"kind"`
	ID     string `json:"id,omitempty"`
	Name   string `json:"name,omitempty"`
	Driver string `json:"driver,omitempty"`
	// Company is set for company-bound resources (leases, bindings,
	// qualification records), and for ActionLease on an environment it is
	// the company the lease would be for; "" for instance-scoped catalog
	// records.
	Company string `json:"company,omitempty"`
	// Scope, for ActionLease on an environment, is the scope (company,
	// project, workspace, agent) whose binding chose the environment; nil
	// when the environment was named by id. The host's Authorizer decides
	// whether the principal belongs to the scope: berth cannot know which
	// projects or workspaces an agent works in (ASG-3).
	Scope *Scope `json:"scope,omitempty"`
}

// String names the resource for error messages: `environment "name" (id)`.
func (r Resource) String() string {
	kind := r.Kind
	if kind == "" {
		kind = "resource"
	}
	s := kind
	switch {
	case r.Name != "" && r.ID != "":
		s += fmt.Sprintf(" %q (%s)", r.Name, r.ID)
	case r.Name != "":
		s += fmt.Sprintf(" %q", r.Name)
	case r.ID != "":
		s += " " + r.ID
	}
	if r.Company != "" {
		s += fmt.Sprintf(" of company %q", r.Company)
	}
	if r.Scope != nil {
		s += " through the binding of " + r.Scope.String()
	}
	return s
}

// Authorizer decides whether a principal may perform an action (AUTH-1). The
// host provides it; DefaultPolicy implements CFG-2 and PRB-7. Authorize
// returns nil to allow, or an error wrapping errcode.ErrDenied that names the
// principal's role and the action and never contains a secret. It must not
// block on I/O for long: it is called on every catalog operation.
type Authorizer interface {
	Authorize(ctx context.Context, p Principal, a Action, r Resource) error
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, p Principal, a Action, r Resource) error

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, p Principal, a Action, r Resource) error {
	return f(ctx, p, a, r)
}

// Denied returns the error an Authorizer returns to refuse p the action a on
// r: it wraps errcode.ErrDenied and names the role, principal id, action and
// resource; its sentence for a person (errcode.MessageOf) names the action
// and the resource by name.
func Denied(p Principal, a Action, r Resource) error {
	what := r.Kind
	if what == "" {
		what = "resource"
	}
	switch {
	case r.Name != "":
		what += fmt.Sprintf(" %q", r.Name)
	case r.ID != "":
		what += " " + r.ID
	}
	return &errcode.Error{
		Message: fmt.Sprintf("You are not allowed to %s %s: ask an instance admin or operator if you need to.", a, what),
		Err:     fmt.Errorf("%s may not %s %s: %w", p, a, r, errcode.ErrDenied),
	}
}

// DefaultPolicy is the Authorizer of CFG-2 and PRB-7:
//
//   - instance admins and local operators may do everything;
//   - board members may read the redacted view (ActionRead) and nothing
//     else: no config, no probe, no mutation;
//   - board members and agents read a company-bound resource (a binding, a
//     lease, a qualification record) only with a grant for its company;
//   - agents may read the redacted view (name, driver, status: what they need
//     to know where they run); they lease an environment only through a
//     binding: ActionLease with a Scope of a company they hold a grant for
//     (and, when the scope names an agent, only their own id), never by
//     environment id; they release a lease (ActionLease on a
//     ResourceKindLease resource) of a company they hold a grant for
//     (ASG-3); they hand a managed account into a sandbox
//     (ActionUseAccount) only for a company they hold a grant for (the
//     project auth check must match besides, AUTH-2); they are denied every
//     mutation, every probe, every sweep, every project auth check
//     (ActionAuthCheck) and the full view, whatever their grants;
//   - agents never read a captured template (ResourceKindTemplate);
//   - only instance admins and local operators have berth read a host's
//     path or repository into a sandbox (ActionReadHost);
//   - every known role reads the instance settings (ActionRead on
//     ResourceKindInstanceSettings); only instance admins and local
//     operators change them (ActionUpdate), as every mutation;
//   - board members and agents read instance-scoped records
//     (Company InstanceCompany: setup and pool leases) and act on none;
//   - a principal without a known role is denied everything, and every
//     action DefaultPolicy does not know is denied.
type DefaultPolicy struct{}

var _ Authorizer = DefaultPolicy{}

// Authorize implements Authorizer.
func (DefaultPolicy) Authorize(_ context.Context, p Principal, a Action, r Resource) error {
	if allowedByDefault(p, a, r) {
		return nil
	}
	return Denied(p, a, r)
}

// companyVisible reports whether a non-admin principal may see r: every
// instance-scoped resource (Company "" or InstanceCompany), and a company-bound one (a binding,
// a lease, a qualification record) only with a grant for its company (ASG-3,
// QUAL-4).
func companyVisible(p Principal, r Resource) bool {
	return r.Company == "" || r.Company == InstanceCompany || p.HasCompany(r.Company)
}

func allowedByDefault(p Principal, a Action, r Resource) bool {
	known := false
	switch a {
	case ActionRead, ActionReadConfig, ActionCreate, ActionUpdate, ActionArchive,
		ActionDelete, ActionProbe, ActionLease, ActionBind, ActionSetup, ActionSweep,
		ActionAuthCheck, ActionUseAccount, ActionReadHost:
		known = true
	}
	if !known {
		return false
	}
	switch p.Role {
	case RoleInstanceAdmin, RoleLocalOperator:
		return true
	case RoleBoardMember:
		return a == ActionRead && companyVisible(p, r)
	case RoleAgent:
		switch a {
		case ActionRead:
			return r.Kind != ResourceKindTemplate && companyVisible(p, r)
		case ActionLease:
			return agentMayLease(p, r)
		case ActionUseAccount:
			return r.Kind == ResourceKindManagedAccount && p.HasCompany(r.Company)
		}
		return false
	}
	return false
}

// agentMayLease is DefaultPolicy's ActionLease rule for agents: a lease
// record of a granted company, or an environment through a scope of a
// granted company that names no other agent. Never by environment id.
func agentMayLease(p Principal, r Resource) bool {
	if r.Kind == ResourceKindLease {
		return r.Scope == nil && p.HasCompany(r.Company)
	}
	s := r.Scope
	if s == nil || s.Company != r.Company || !p.HasCompany(s.Company) {
		return false
	}
	return s.Agent == "" || s.Agent == p.ID
}

// Scope is what a run needs a target for: its company (required) and the
// workspace, project and agent it belongs to ("" when it has none). The
// environment package resolves a Scope to a target through its bindings;
// here it tells an Authorizer through which binding a lease was chosen.
type Scope struct {
	Company   string `json:"company"`
	Workspace string `json:"workspace,omitempty"`
	Project   string `json:"project,omitempty"`
	Agent     string `json:"agent,omitempty"`
}

// String returns `company "acme" (workspace ws_1, project p_1, agent a_1)`,
// leaving out what the scope does not have.
func (s Scope) String() string {
	var parts []string
	for _, kv := range [...][2]string{{"workspace", s.Workspace}, {"project", s.Project}, {"agent", s.Agent}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+" "+kv[1])
		}
	}
	out := fmt.Sprintf("company %q", s.Company)
	if len(parts) > 0 {
		out += " (" + strings.Join(parts, ", ") + ")"
	}
	return out
}
