// Package fakectl holds the controls of the fake driver (drivers/fake) that
// only berth's own tests use: injected faults, false stop receipts, call
// counts, the provider's sandbox table, slow starts, lost sandboxes and
// snapshots, and the knobs of the provider a test sets right after
// fake.New. Package fake sets Of in its init:
//
//	fk := fake.New(nil)
//	fakectl.Of(fk).FailNth("create", 2, drivers.ErrTransient) // the second create fails
//	n := fakectl.Of(fk).Calls("create")
//
// An operation is named by its string: "create" (the create call of
// Acquire, before a sandbox exists), "start" (a created sandbox's start, or
// a stopped one's at Resume), "exec", "stream" (StreamExecer.Start),
// "terminal", "stop" (Release(Stop)), "destroy" (Release(Destroy) and
// Destroyer.Destroy), "resume", "list", "image_identity", "capture",
// "delete_template", "health" (drivers.HealthChecker), "runner"
// (RunnerHost.HostRunner and RunnerIngress.Launch) and "files"
// (drivers.Files). A name the fake does not
// know panics, a mistake of the test that passed it. Faults are
// deterministic: they depend only on call counts and sandbox ids, never on
// time.
package fakectl

import (
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
)

// Controls are the test controls of one fake driver. They are safe to use
// while the driver is in use, but for the Set knobs of the provider
// (SetClock, SetStartupBudget, SetDeleteInUse), which a test sets right
// after fake.New, before the driver is used.
type Controls interface {
	// Inject makes every call of f.Op fail until ClearFaults.
	Inject(f Fault)
	// FailNth makes the nth call (1-based, counted from the driver's
	// creation) of op fail with err (nil: an error wrapping
	// drivers.ErrTransient).
	FailNth(op string, n int, err error)
	// RefuseStop makes every stop and destroy (Release and Destroy) of the
	// sandbox id fail with err, as a Fault does, leaving its state
	// unchanged.
	RefuseStop(id string, err error)
	// FakeStop makes every stop and destroy of the sandbox id return a
	// receipt that is not proof (drivers.Receipt.Proves) and leave the
	// sandbox running, until ClearFaults. lie says which: "unconfirmed"
	// (an unconfirmed receipt, "stop accepted"), "foreign_id" (a confirmed
	// receipt for another provider lease id) or "runner_attested" (a
	// confirmed receipt on the runner's word only,
	// drivers.EvidenceRunnerAttested). It panics on another lie.
	FakeStop(id, lie string)
	// ReportWrongImage makes ImageIdentity of the sandbox id report an
	// image other than the one it runs, until ClearFaults.
	ReportWrongImage(id string)
	// ClearFaults removes every injected fault, stop lie and wrong image
	// report. Call counts are kept.
	ClearFaults()
	// Lose makes the sandbox id vanish, as if deleted behind berth's back:
	// Exec and Resume fail with errcode.ErrNotFound, List omits it, a
	// destroy is confirmed. An unknown id is an error wrapping
	// errcode.ErrNotFound.
	Lose(id string) error
	// Calls returns how many times op was called, failed calls included.
	Calls(op string) int
	// TotalCalls returns the number of operations called so far: 0 shows
	// that reading capabilities, schemas or listings allocated nothing
	// (CAP-1).
	TotalCalls() int
	// Sandboxes returns every sandbox the provider knows (destroyed, not
	// lost), sorted by id, for leak checks. It is not counted.
	Sandboxes() []Sandbox
	// State returns the state of the sandbox id, false if unknown or
	// lost. It is not counted.
	State(id string) (drivers.State, bool)
	// AddSnapshot creates a snapshot named name and returns its provider id
	// (derived from the name and its earlier snapshots). The name now
	// resolves to it; an older snapshot of the name keeps its id until
	// deleted.
	AddSnapshot(name string) string
	// DeleteSnapshot deletes the snapshot id at the provider, used or not:
	// its name no longer resolves to it, and an Acquire of the id fails
	// with drivers.ErrImageNotFound, even when a new snapshot takes the
	// name (QUAL-6).
	DeleteSnapshot(id string)
	// SetStartDelay sets how long, on the driver's clock, sandboxes
	// created or resumed from now on stay starting. Default 0: started at
	// once.
	SetStartDelay(delay time.Duration)
	// SetClock sets the clock that runs slow starts and sleep (default
	// the wall clock).
	SetClock(c clock.Clock)
	// SetStartupBudget sets the provider-declared startup budget
	// (drivers.Capabilities.StartupBudget; default none).
	SetStartupBudget(budget time.Duration)
	// SetDeleteInUse makes DeleteTemplate delete what sandboxes use (as
	// Daytona); default false: drivers.ErrInUse (as Docker).
	SetDeleteInUse(on bool)
}

// Fault makes calls of one operation fail.
type Fault struct {
	// Op is the operation that fails, every call of it until ClearFaults.
	Op string
	// Err is returned, wrapped; nil: an error wrapping
	// drivers.ErrTransient.
	Err error
}

// Sandbox is one sandbox of the fake provider as Controls.Sandboxes reports
// it.
type Sandbox struct {
	ID     string
	State  drivers.State
	Labels map[string]string
	// Image is what the sandbox was created from.
	Image images.Identity
}

// Of returns the controls of d, a *fake.Driver (it panics on another
// value). Package fake sets it in its init.
var Of func(d any) Controls
