package sqlstore

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Migration is one forward-only schema step of a component. Steps are never
// edited once released: a change is a new step.
type Migration struct {
	// Version numbers a component's steps 1, 2, 3, ... without gaps.
	Version int
	// Name says what the step does ("create environments").
	Name string
	// SQL holds the statements, run in order, in the SQL both databases
	// share (TEXT, BIGINT, INTEGER, UNIQUE indexes, partial indexes).
	SQL []string
	// Postgres, if not nil, replaces SQL on PostgreSQL (for BYTEA, JSONB,
	// identity columns and the like).
	Postgres []string
}

// Component is a group of tables owned by one package (environment, lease,
// qualification, custom_images). Each component keeps its own version
// sequence in schema_migrations, so components are added without editing
// each other's files.
type Component struct {
	// Name is the component's key in schema_migrations: lower case,
	// unique.
	Name string
	// After names components whose migrations must run first (for foreign
	// keys into their tables).
	After []string
	// Migrations are the steps in Version order.
	Migrations []Migration
}

// components is the registry of components without global state: every
// exported method of components that takes no argument and returns a
// Component contributes one. A component's file adds its method, e.g.
//
//	func (components) Environment() Component { return Component{Name: "environment", ...} }
//
// so that two components never edit the same file, and the compiler rejects
// two components with the same method name.
type components struct{}

// allComponents returns every component, checked (unique names, versions
// 1..n, known dependencies, no cycles) and ordered so that each comes after
// the components it names in After, else by name.
func allComponents() ([]Component, error) {
	v := reflect.ValueOf(components{})
	ct := reflect.TypeFor[Component]()
	var all []Component
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Method(i)
		if m.Type().NumIn() != 0 || m.Type().NumOut() != 1 || m.Type().Out(0) != ct {
			return nil, fmt.Errorf("sqlstore: components.%s must be func() Component", v.Type().Method(i).Name)
		}
		all = append(all, m.Call(nil)[0].Interface().(Component))
	}
	return orderComponents(all)
}

// orderComponents checks all and orders it (see allComponents).
func orderComponents(all []Component) ([]Component, error) {
	all = slices.Clone(all)
	byName := map[string]Component{}
	for _, c := range all {
		if c.Name == "" || strings.ToLower(c.Name) != c.Name {
			return nil, fmt.Errorf("sqlstore: component name %q must be lower case and not empty", c.Name)
		}
		if _, dup := byName[c.Name]; dup {
			return nil, fmt.Errorf("sqlstore: component %q registered twice", c.Name)
		}
		byName[c.Name] = c
		for i, m := range c.Migrations {
			if m.Version != i+1 {
				return nil, fmt.Errorf("sqlstore: component %q: migration %d has version %d, want %d", c.Name, i, m.Version, i+1)
			}
			if len(m.SQL) == 0 {
				return nil, fmt.Errorf("sqlstore: component %q: migration %d has no SQL", c.Name, m.Version)
			}
		}
	}
	slices.SortFunc(all, func(a, b Component) int { return strings.Compare(a.Name, b.Name) })
	// Depth-first topological order, stable by name.
	var order []Component
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(c Component) error
	visit = func(c Component) error {
		switch state[c.Name] {
		case 1:
			return fmt.Errorf("sqlstore: component %q: cycle in After", c.Name)
		case 2:
			return nil
		}
		state[c.Name] = 1
		for _, dep := range slices.Sorted(slices.Values(c.After)) {
			d, ok := byName[dep]
			if !ok {
				return fmt.Errorf("sqlstore: component %q: After names unknown component %q", c.Name, dep)
			}
			if err := visit(d); err != nil {
				return err
			}
		}
		state[c.Name] = 2
		order = append(order, c)
		return nil
	}
	for _, c := range all {
		if err := visit(c); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// migrateLockKey is the PostgreSQL advisory lock that serializes migrations
// of every process opening the same database.
const migrateLockKey = 0x62657274686d6967 // "berthmig"

// migrate applies every pending migration of every component in one
// transaction: all or nothing. Concurrent Opens are safe: on PostgreSQL they
// queue on an advisory lock taken before anything is read, on SQLite on the
// write lock of BEGIN IMMEDIATE; the second finds the work done. A database
// whose component has a version this binary does not know (written by a
// newer berth) is refused.
func (db *DB) migrate(ctx context.Context) error {
	comps, err := allComponents()
	if err != nil {
		return err
	}
	err = db.inTx(ctx, func(tx handle) error {
		if db.d == postgres {
			if _, err := tx.exec(ctx, "SELECT pg_advisory_xact_lock(?)", int64(migrateLockKey)); err != nil {
				return err
			}
		}
		if _, err := tx.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			component TEXT NOT NULL,
			version INTEGER NOT NULL,
			name TEXT NOT NULL,
			applied_at BIGINT NOT NULL,
			PRIMARY KEY (component, version))`); err != nil {
			return err
		}
		applied, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		for _, c := range comps {
			have := applied[c.Name]
			if have > len(c.Migrations) {
				return fmt.Errorf("component %q is at version %d, newer than this build knows (%d)", c.Name, have, len(c.Migrations))
			}
			for _, m := range c.Migrations[have:] {
				stmts := m.SQL
				if db.d == postgres && m.Postgres != nil {
					stmts = m.Postgres
				}
				for _, s := range stmts {
					if _, err := tx.exec(ctx, s); err != nil {
						return fmt.Errorf("component %q migration %d (%s): %w", c.Name, m.Version, m.Name, err)
					}
				}
				if _, err := tx.exec(ctx, "INSERT INTO schema_migrations (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
					c.Name, m.Version, m.Name, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlstore: migrate %s: %w", db.target, err)
	}
	return nil
}

func appliedVersions(ctx context.Context, tx handle) (map[string]int, error) {
	rows, err := tx.query(ctx, "SELECT component, MAX(version) FROM schema_migrations GROUP BY component")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var c string
		var v int
		if err := rows.Scan(&c, &v); err != nil {
			return nil, err
		}
		out[c] = v
	}
	return out, rows.Err()
}

// SchemaVersions returns the applied migration version of every component
// in the database, for diagnostics and tests.
func (db *DB) SchemaVersions(ctx context.Context) (map[string]int, error) {
	vs, err := appliedVersions(ctx, db.reads())
	if err != nil {
		return nil, fmt.Errorf("sqlstore: schema versions of %s: %w", db.target, err)
	}
	return vs, nil
}
