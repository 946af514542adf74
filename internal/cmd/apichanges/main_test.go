package main

import (
	"strings"
	"testing"
)

// Names are matched by package, kind and name; a removed name takes its
// replacement from the notes, a kept name with another signature is listed
// as changed, and a new name as added.
func TestChanges(t *testing.T) {
	old := parse(`pkg github.com/berthdev/berth/lease, func NewMemoryStore() *MemoryStore
pkg github.com/berthdev/berth/lease, type MemoryStore struct
pkg github.com/berthdev/berth/lease, method (*MemoryStore) Get(context.Context, string) (Lease, error)
pkg github.com/berthdev/berth/lease, type Lease struct, ID string
pkg github.com/berthdev/berth/lease, const LabelPool
pkg github.com/berthdev/berth, type Options struct, Stores store.Stores
pkg github.com/berthdev/berth/images/custom, type Template struct
`)
	now := parse(`pkg github.com/berthdev/berth/lease, func NewMemoryStore() Store
pkg github.com/berthdev/berth/lease, type Lease struct, ID string
pkg github.com/berthdev/berth, type Options struct, Stores store.Stores
pkg github.com/berthdev/berth, func Run()
`)
	if len(old) != 7 || old["lease.MemoryStore.Get"].kind != "method" || old["lease.Lease.ID"].kind != "field" || old["berth.Options.Stores"].kind != "field" {
		t.Fatalf("parse: %+v", old)
	}
	var b strings.Builder
	write(&b, "base", old, now, []note{
		{"`lease.MemoryStore` (type)", "`lease.Store` (returned by `NewMemoryStore`)"},
		{"package `images/custom`", "package `templates`"},
	})
	got := b.String()
	for _, want := range []string{
		"| `lease.MemoryStore` | type | `lease.Store` (returned by `NewMemoryStore`) |",
		"| `lease.MemoryStore.Get` | method | `lease.Store` (returned by `NewMemoryStore`) |",
		"| `lease.LabelPool` | const | — (unexported: only berth's own packages used it) |",
		"| `images/custom.Template` | type | package `templates` |",
		"| `lease.NewMemoryStore` | `func NewMemoryStore() *MemoryStore` | `func NewMemoryStore() Store` |",
		"| `berth.Run` | `func Run()` |",
		"4 names removed or renamed, 1 changed, 1 added",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "lease.Lease.ID") {
		t.Errorf("an unchanged name is listed:\n%s", got)
	}
}
