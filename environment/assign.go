package environment

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/berthdev/berth/errcode"
)

// BindingKind is the level an assignment binding applies at (ASG-1).
type BindingKind string

// The binding kinds, from the strongest to the weakest in resolution
// (ASG-1): workspace, then project, then agent default, then instance
// default.
const (
	// BindingWorkspace binds one workspace (Key = workspace id) of a company.
	BindingWorkspace BindingKind = "workspace"
	// BindingProject binds one project (Key = project id) of a company.
	BindingProject BindingKind = "project"
	// BindingAgent is an agent's default (Key = agent id) within its company.
	BindingAgent BindingKind = "agent"
	// BindingInstanceDefault is the instance default: it has no key and no
	// company and applies to every company of the instance.
	BindingInstanceDefault BindingKind = "instance_default"
)

// bindingKinds lists the kinds in resolution precedence, strongest first
// (ASG-1).
func bindingKinds() []BindingKind {
	return []BindingKind{BindingWorkspace, BindingProject, BindingAgent, BindingInstanceDefault}
}

// Valid reports whether k is one of the four binding kinds.
func (k BindingKind) Valid() bool {
	switch k {
	case BindingWorkspace, BindingProject, BindingAgent, BindingInstanceDefault:
		return true
	}
	return false
}

// BindingRef identifies a binding: its kind, company and key. The key is
// the workspace, project or agent id; Company owns the binding. Both are
// "" for the instance default. Bindings are unique by (Kind, Company, Key)
// in an instance: two companies may each bind their workspace "ws", and
// there is one instance default.
type BindingRef struct {
	Kind BindingKind `json:"kind"`
	// Company owns the binding: only that company's runs may use it
	// (ASG-3); "" for the instance default.
	Company string `json:"company,omitempty"`
	Key     string `json:"key,omitempty"`
}

// String returns "workspace ws_1", "project p_1", "agent a_1" or
// "instance default" (without the company: Binding.String adds it).
func (r BindingRef) String() string {
	if r.Kind == BindingInstanceDefault {
		return "instance default"
	}
	if r.Key == "" {
		return string(r.Kind)
	}
	return fmt.Sprintf("%s %s", r.Kind, r.Key)
}

// Binding assigns an environment to a workspace, project, agent or the
// whole instance (ASG-1). Workspace, project and agent bindings belong to a
// company (BindingRef.Company): only that company's runs may use them
// (ASG-3). The instance default belongs to no company and applies to every
// company. A Binding holds ids only, never config or secrets.
type Binding struct {
	BindingRef
	// EnvironmentID is the bound environment.
	EnvironmentID string `json:"environmentId"`
	// Revision starts at 1 and grows by one on every change.
	Revision  int64     `json:"revision"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	CreatedBy string    `json:"createdBy,omitempty"` // actor id
	UpdatedBy string    `json:"updatedBy,omitempty"` // actor id
}

// String names the binding for messages: `workspace ws_1 binding of
// company "acme"`, or `instance default binding`. It holds no secret.
func (b Binding) String() string {
	s := b.BindingRef.String() + " binding"
	if b.Company != "" {
		s += fmt.Sprintf(" of company %q", b.Company)
	}
	return s
}

// maxBindingIDLen bounds keys, companies and environment ids of bindings.
const maxBindingIDLen = 200

// Validate checks the shape of b: a known kind; for the instance default no
// key and no company; for the other kinds a key and a company; an
// environment id; ids without control characters or surrounding space, at
// most 200 bytes each. It returns an error wrapping errcode.ErrInvalid that names
// the field.
func (b Binding) Validate() error {
	if !b.Kind.Valid() {
		return fmt.Errorf("environment: binding: field \"kind\": %q is not one of workspace, project, agent, instance_default: %w", b.Kind, errcode.ErrInvalid)
	}
	if b.Kind == BindingInstanceDefault {
		if b.Key != "" {
			return fmt.Errorf("environment: %s: field \"key\": must be empty for the instance default: %w", b, errcode.ErrInvalid)
		}
		if b.Company != "" {
			return fmt.Errorf("environment: %s: field \"company\": must be empty: the instance default applies to every company: %w", b, errcode.ErrInvalid)
		}
	} else {
		if err := checkBindingID(b, "key", b.Key); err != nil {
			return err
		}
		if err := checkBindingID(b, "company", b.Company); err != nil {
			return err
		}
	}
	return checkBindingID(b, "environmentId", b.EnvironmentID)
}

func checkBindingID(b Binding, field, v string) error {
	reason := ""
	switch {
	case v == "":
		reason = "required"
	case len(v) > maxBindingIDLen:
		reason = fmt.Sprintf("longer than %d bytes", maxBindingIDLen)
	case strings.TrimSpace(v) != v:
		reason = "has leading or trailing space"
	case strings.ContainsFunc(v, unicode.IsControl):
		reason = "contains a control character"
	}
	if reason == "" {
		return nil
	}
	return fmt.Errorf("environment: %s: field %q: %s: %w", b, field, reason, errcode.ErrInvalid)
}

// BindingFilter selects bindings in BindingStore.ListBindings. Zero fields
// match everything.
type BindingFilter struct {
	Kind          BindingKind
	Company       string
	EnvironmentID string
}

// BindingStore persists assignment bindings. Implementations:
// memoryBindingStore in this package, and SQLite and PostgreSQL in
// store/sqlite and store/postgres; all pass the environment/environmenttest binding suite. A
// BindingStore is safe for concurrent use, each method is atomic, and it
// stores and returns copies. It does not check that environments exist:
// Assignments does.
//
// A value that is both the Store and the BindingStore (one pointer, as the
// SQL stores are) may also have the method
//
//	GetEnvironmentBindings(ctx context.Context, id string) (*Environment, []*Binding, error)
//
// which returns environment id (or an error wrapping errcode.ErrNotFound)
// and the bindings whose EnvironmentID is id, sorted as ListBindings sorts
// them, in one read of one snapshot: the assignments then read a lease
// target in one round trip to the database instead of two. The binding
// suite checks that it answers what GetEnvironment and ListBindings
// answer.
type BindingStore interface {
	// PutBinding stores b. b.Validate must pass (else errcode.ErrInvalid) and
	// b.Revision must be baseRevision+1 (else errcode.ErrConflict). With
	// baseRevision 0 it inserts b and returns an error wrapping errcode.ErrConflict
	// if a binding with b's kind, company and key exists (a binding of
	// another company with the same kind and key is another binding). Otherwise it replaces the
	// stored binding if its revision equals baseRevision, else errcode.ErrConflict
	// (errcode.ErrNotFound if none is stored). Nothing changes on error.
	PutBinding(ctx context.Context, b *Binding, baseRevision int64) error
	// GetBinding returns the binding with ref's kind, company and key, or
	// an error wrapping errcode.ErrNotFound.
	GetBinding(ctx context.Context, ref BindingRef) (*Binding, error)
	// DeleteBinding removes the binding ref if its stored revision equals
	// baseRevision, else errcode.ErrConflict (errcode.ErrNotFound if absent).
	DeleteBinding(ctx context.Context, ref BindingRef, baseRevision int64) error
	// ListBindings returns the matching bindings sorted by kind, then key,
	// then company (byte order).
	ListBindings(ctx context.Context, f BindingFilter) ([]*Binding, error)
	// DeleteEnvironmentBindings removes every binding of environment envID
	// at once and returns how many it removed (0 when none: it is
	// idempotent).
	DeleteEnvironmentBindings(ctx context.Context, envID string) (int, error)
}

// targetReader is what a value that is both the Store and the BindingStore
// of an Assignments may also be (see BindingStore; the SQL stores are).
type targetReader interface {
	GetEnvironmentBindings(ctx context.Context, id string) (*Environment, []*Binding, error)
}
