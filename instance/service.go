package instance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/instancehook"
)

// defaultMaxStaleness is instancehook.Options.MaxStaleness's default: how old the
// settings the Reader returns may be when another process (a replica on
// the same store) changed them.
const defaultMaxStaleness = time.Second

// AnyRevision as Update's revision writes over whatever is stored.
const AnyRevision int64 = -1

// maxReadWait bounds one shared store read of the Reader.
const maxReadWait = 30 * time.Second

// Service reads and changes the instance settings for a principal. It is
// safe for concurrent use.
type Service struct {
	st    Store
	authz authz.Authorizer
	log   *slog.Logger
	clock clock.Clock
	cache *cache
}

func init() {
	instancehook.New = func(st any, o instancehook.Options) (any, any) {
		svc, r := newService(st.(Store), o)
		return svc, r
	}
}

// newService returns the service over st and the Reader the environment
// gate reads (environment.Options.Settings): a hook for no principal,
// not an entry point, so it is built by berth.New (internal/instancehook)
// rather than exported as a method. The Reader keeps the settings it read
// for o.MaxStaleness; the Service's reads and updates refresh it.
func newService(st Store, o instancehook.Options) (*Service, Reader) {
	if st == nil {
		panic("instance: a Service needs a Store")
	}
	if o.Authorizer == nil {
		o.Authorizer = authz.DefaultPolicy{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.MaxStaleness == 0 {
		o.MaxStaleness = defaultMaxStaleness
	}
	c := &cache{st: st, clock: o.Clock, max: o.MaxStaleness}
	return &Service{st: st, authz: o.Authorizer, log: o.Logger, clock: o.Clock, cache: c}, c
}

// resource is what every request of the service is about.
var resource = authz.Resource{Kind: authz.ResourceKindInstanceSettings}

// Get returns the settings in force, read from the store (Defaults, at
// revision 0, when none were ever written). Any principal the Authorizer
// lets read the resource authz.ResourceKindInstanceSettings may: under
// authz.DefaultPolicy every known role (instance admins, local operators,
// board members, agents); a refusal wraps errcode.ErrDenied (the settings
// are instance-wide, so a refusal reveals nothing).
func (s *Service) Get(ctx context.Context, p authz.Principal) (Settings, error) {
	if err := s.authorize(ctx, p, authz.ActionRead); err != nil {
		return Settings{}, err
	}
	return s.read(ctx)
}

// Update changes the settings for p: change sets the fields it changes
// in a copy of the settings in force, and the result is stored with
// Revision one more than before, UpdatedAt now and UpdatedBy p.ID, and
// returned (change's own Revision, UpdatedAt and UpdatedBy are ignored).
// An error of change is returned as it is, and nothing is written.
// revision is the Settings.Revision the change is based on (0 while the
// caller read the defaults); a stale one is errcode.ErrConflict and
// nothing is written. AnyRevision writes over whatever is stored: the
// settings are read again and change applied again when another writer
// wins in between (a few times: under sustained contention it may still
// end in errcode.ErrConflict). A negative quota is errcode.ErrInvalid
// (0 sets no limit). Only a principal the Authorizer lets update
// authz.ResourceKindInstanceSettings may: under authz.DefaultPolicy
// instance admins and local operators (who have an instance admin's
// powers); others get an error wrapping errcode.ErrDenied, and change is
// not called. The change is seen at once by this Service's Reader, and by
// other processes' Readers within a second.
func (s *Service) Update(ctx context.Context, p authz.Principal, revision int64, change func(*Settings) error) (Settings, error) {
	if err := s.authorize(ctx, p, authz.ActionUpdate); err != nil {
		return Settings{}, err
	}
	if revision < AnyRevision {
		return Settings{}, fmt.Errorf("instance: settings update: field \"revision\": %d is not a revision: %w", revision, errcode.ErrInvalid)
	}
	const attempts = 5
	var err error
	for range attempts {
		var cur, next Settings
		cur, err = s.read(ctx)
		if err != nil {
			return Settings{}, err
		}
		if revision != AnyRevision && cur.Revision != revision {
			err = fmt.Errorf("instance: settings update: stale revision %d, stored revision is %d: %w", revision, cur.Revision, errcode.ErrConflict)
			break
		}
		next = cur
		if change != nil {
			if err := change(&next); err != nil {
				return Settings{}, err
			}
		}
		switch {
		case next.QuotaPerCompany < 0:
			return Settings{}, fmt.Errorf("instance: settings update: field \"quotaPerCompany\": %d is negative (0 sets no limit): %w", next.QuotaPerCompany, errcode.ErrInvalid)
		case next.QuotaPerCompanyEnvironment < 0:
			return Settings{}, fmt.Errorf("instance: settings update: field \"quotaPerCompanyEnvironment\": %d is negative (0 sets no limit): %w", next.QuotaPerCompanyEnvironment, errcode.ErrInvalid)
		case next.MinimumIsolation > drivers.IsolationMicroVM:
			return Settings{}, fmt.Errorf("instance: settings update: field \"minimumIsolation\": %s is no isolation level (none, container, gvisor, microvm): %w", next.MinimumIsolation, errcode.ErrInvalid)
		}
		next.Revision, next.UpdatedAt, next.UpdatedBy = cur.Revision+1, s.clock.Now().UTC(), p.ID
		if err = s.st.PutSettings(ctx, next); err == nil {
			s.cache.offer(next)
			s.log.LogAttrs(ctx, slog.LevelInfo, "instance settings updated",
				slog.Bool("enableEnvironments", next.EnableEnvironments), slog.Bool("enableManagedSandboxOnly", next.ManagedSandboxOnly),
				slog.String("minimumIsolation", next.MinimumIsolation.String()), slog.Int("quotaPerCompany", next.QuotaPerCompany), slog.Int("quotaPerCompanyEnvironment", next.QuotaPerCompanyEnvironment),
				slog.Int64("revision", next.Revision), slog.String("actor", p.ID), slog.String("role", string(p.Role)))
			return next, nil
		}
		err = fmt.Errorf("instance: settings update at revision %d: %w", cur.Revision, err)
		if revision != AnyRevision || !errors.Is(err, errcode.ErrConflict) {
			break
		}
	}
	if errors.Is(err, errcode.ErrConflict) {
		err = &errcode.Error{Code: errcode.Conflict, Reason: reasonStaleRevision, Target: "the instance settings",
			Message: "The instance settings were changed by someone else since you read them: reload them and apply your change again.", Err: err}
	}
	s.log.LogAttrs(ctx, slog.LevelWarn, "instance settings update failed",
		slog.String("actor", p.ID), slog.String("role", string(p.Role)), slog.String("error", err.Error()))
	return Settings{}, err
}

// read returns the stored settings or Defaults, and refreshes the cache.
func (s *Service) read(ctx context.Context) (Settings, error) {
	cur, err := readStore(ctx, s.st)
	if err != nil {
		return Settings{}, err
	}
	s.cache.offer(cur)
	return cur, nil
}

func (s *Service) authorize(ctx context.Context, p authz.Principal, a authz.Action) error {
	err := s.authz.Authorize(ctx, p, a, resource)
	if err == nil {
		return nil
	}
	if !errors.Is(err, errcode.ErrDenied) {
		err = fmt.Errorf("%w: %w", authz.Denied(p, a, resource), err)
	}
	if a.IsMutation() {
		s.log.LogAttrs(ctx, slog.LevelWarn, "instance settings action denied",
			slog.String("action", string(a)), slog.String("actor", p.ID), slog.String("role", string(p.Role)))
	}
	return err
}

// readStore returns the stored record, or Defaults when none was written.
func readStore(ctx context.Context, st Store) (Settings, error) {
	cur, err := st.GetSettings(ctx)
	if errors.Is(err, errcode.ErrNotFound) {
		return Defaults(), nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("instance: reading the settings: %w", err)
	}
	return cur, nil
}

// cache is the Reader newService returns: the last settings read, kept
// for max; concurrent reads of an expired copy share one store read.
type cache struct {
	st    Store
	clock clock.Clock
	max   time.Duration
	sf    singleflight.Group

	mu    sync.Mutex
	cur   Settings
	at    time.Time
	valid bool
}

// Current implements Reader.
func (c *cache) Current(ctx context.Context) (Settings, error) {
	if c.max < 0 {
		return readStore(ctx, c.st)
	}
	c.mu.Lock()
	if c.valid && c.clock.Now().Sub(c.at) < c.max {
		cur := c.cur
		c.mu.Unlock()
		return cur, nil
	}
	c.mu.Unlock()
	// One read for every caller of an expired copy, detached from each
	// caller's cancellation (and bounded), each caller waiting only as long
	// as its own ctx allows.
	ch := c.sf.DoChan("", func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxReadWait)
		defer cancel()
		s, err := readStore(rctx, c.st)
		if err != nil {
			return nil, err
		}
		c.offerAt(s, c.clock.Now())
		return s, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Settings{}, r.Err
		}
		return r.Val.(Settings), nil
	case <-ctx.Done():
		return Settings{}, fmt.Errorf("instance: reading the settings: %w", ctx.Err())
	}
}

// offer keeps s, read or written now, unless a newer revision is kept.
func (c *cache) offer(s Settings) { c.offerAt(s, c.clock.Now()) }

func (c *cache) offerAt(s Settings, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid && s.Revision < c.cur.Revision {
		return
	}
	c.cur, c.at, c.valid = s, at, true
}

// reasonStaleRevision is the reason of an update at a revision that is
// no longer the stored one (docs/errors.md).
const reasonStaleRevision = "stale_revision"
