package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
)

// maxCachedStmts bounds a stmtCache: the store's statements are a fixed
// set (list filters combine into a few dozen), so the bound is never
// reached in practice; past it statements are simply not cached.
const maxCachedStmts = 256

// stmtCache keeps one prepared statement per query text on a SQLite pool,
// so that the hot statements (the lease record's insert, update and claim)
// are parsed and planned once instead of on every call: SQLite's parser
// and planner were a fifth of an acquire+release's cost. database/sql
// prepares a cached statement again on each connection of the pool that
// runs it. PostgreSQL needs none: pgx caches its prepared statements per
// connection itself.
type stmtCache struct {
	pool *sql.DB

	mu     sync.RWMutex
	stmts  map[string]*sql.Stmt
	closed bool
}

func newStmtCache(pool *sql.DB) *stmtCache {
	return &stmtCache{pool: pool, stmts: map[string]*sql.Stmt{}}
}

// get returns the prepared statement of q, preparing it on first use, or
// nil when q is not cached (the cache is full or closed, q holds several
// statements, or preparing failed: the caller then runs q unprepared, which
// reports the error).
func (c *stmtCache) get(ctx context.Context, q string) *sql.Stmt {
	c.mu.RLock()
	st, ok := c.stmts[q]
	c.mu.RUnlock()
	if ok {
		return st
	}
	if strings.Contains(q, ";") {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[q]; ok {
		return st
	}
	if c.closed || len(c.stmts) >= maxCachedStmts {
		return nil
	}
	st, err := c.pool.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	c.stmts[q] = st
	return st
}

// close closes every cached statement; get caches nothing afterwards.
func (c *stmtCache) close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for q, st := range c.stmts {
		errs = append(errs, st.Close())
		delete(c.stmts, q)
	}
	c.closed = true
	return errors.Join(errs...)
}
