package fake

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers"
)

// Op names one provider operation of the fake, for counters (Driver.Calls)
// and fault injection (Fault). Every call is counted, failed ones included.
type Op int

// The operations.
const (
	OpCreate         Op = iota // the create call of Acquire, before a sandbox exists
	OpStart                    // starts a created sandbox (Acquire, after Allocated) or a stopped one (Resume)
	OpExec                     // Sandbox.Exec
	OpStream                   // StreamExecer.Start
	OpTerminal                 // Terminal.OpenTerminal
	OpStop                     // Release(Stop)
	OpDestroy                  // Release(Destroy) and Destroyer.Destroy
	OpResume                   // Resumer.Resume
	OpList                     // Lister.List
	OpImageIdentity            // ImageReporter.ImageIdentity
	OpCapture                  // Capturer.Capture
	OpDeleteTemplate           // TemplateDeleter.DeleteTemplate
	OpHealth                   // drivers.HealthChecker.CheckHealth
	OpRunner                   // drivers.RunnerHost.HostRunner and RunnerIngress.Launch

	numOps
)

// String returns the operation's name ("create", "exec", ...).
func (o Op) String() string {
	if names := strings.Fields("create start exec stream terminal stop destroy resume list " +
		"image_identity capture delete_template health runner"); o >= 0 && o < numOps {
		return names[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Fault makes calls of one operation fail. Faults are deterministic: they
// depend only on call counts and sandbox ids, never on time.
type Fault struct {
	Op Op // the operation that fails
	// Nth, if > 0, fails only the Nth call of Op (1-based, as Driver.Calls
	// counts); 0 fails every matching call until ClearFaults.
	Nth int
	// Sandbox, if not "", fails only calls about that provider lease id.
	Sandbox string
	// Err is the error returned, wrapped with the operation and sandbox;
	// nil means an error wrapping drivers.ErrTransient.
	Err error
}

// Lie is a false stop confirmation the fake can give (see FakeStop).
type Lie int

const (
	// LieUnconfirmed returns an unconfirmed receipt ("stop accepted").
	LieUnconfirmed Lie = iota + 1
	// LieForeignID returns a confirmed receipt for another provider lease id.
	LieForeignID
	// LieRunnerAttested returns a confirmed receipt whose evidence is only
	// the runner's word (drivers.EvidenceRunnerAttested).
	LieRunnerAttested
)

// Inject adds a fault. It is safe to call while the driver is in use.
func (d *Driver) Inject(f Fault) { d.locked(func() { d.o.Faults = append(d.o.Faults, f) }) }

// FailNth makes the nth call (1-based, counted from the driver's creation)
// of op fail with err (nil: an error wrapping drivers.ErrTransient).
func (d *Driver) FailNth(op Op, n int, err error) {
	if n <= 0 {
		panic("fake: FailNth needs n >= 1")
	}
	d.Inject(Fault{Op: op, Nth: n, Err: err})
}

// RefuseStop makes every Release(Stop), Release(Destroy) and Destroy of the
// sandbox id fail with err (nil: an error wrapping drivers.ErrTransient),
// leaving its state unchanged, until ClearFaults.
func (d *Driver) RefuseStop(id string, err error) {
	d.Inject(Fault{Op: OpStop, Sandbox: id, Err: err})
	d.Inject(Fault{Op: OpDestroy, Sandbox: id, Err: err})
}

// FakeStop makes every stop and destroy of the sandbox id (as RefuseStop)
// return a receipt that is not proof (drivers.Receipt.Proves) and leave the
// sandbox running, until ClearFaults.
func (d *Driver) FakeStop(id string, lie Lie) { d.locked(func() { d.lies[id] = lie }) }

// ReportWrongImage makes ImageIdentity of the sandbox id report an image
// other than the one it runs, until ClearFaults.
func (d *Driver) ReportWrongImage(id string) { d.locked(func() { d.wrongImage[id] = true }) }

// ClearFaults removes every injected fault, stop lie and wrong image report.
// Call counts are kept.
func (d *Driver) ClearFaults() {
	d.locked(func() { d.o.Faults, d.lies, d.wrongImage = nil, map[string]Lie{}, map[string]bool{} })
}

// SetStartDelay sets how long, on the driver's clock, sandboxes created or
// resumed from now on stay starting (Options.StartDelay).
func (d *Driver) SetStartDelay(delay time.Duration) { d.locked(func() { d.o.StartDelay = delay }) }

// Lose makes the sandbox id vanish, as if deleted behind berth's back: Exec
// and Resume then fail with drivers.ErrNotFound, List omits it, and
// destroying it gives a confirmed "not found" receipt. An unknown id is an
// error wrapping drivers.ErrNotFound.
func (d *Driver) Lose(id string) (err error) {
	d.locked(func() {
		if b, ok := d.boxes[id]; ok {
			b.cancel()
			delete(d.boxes, id)
		} else {
			err = fmt.Errorf("fake: lose %s: %w", id, drivers.ErrNotFound)
		}
	})
	return err
}

// Calls returns how many times op was called, failed calls included.
func (d *Driver) Calls(op Op) (n int) {
	d.locked(func() { n = d.calls[op] })
	return n
}

// TotalCalls returns the number of operations called so far: 0 shows that
// reading capabilities, schemas or listings allocated nothing (CAP-1).
func (d *Driver) TotalCalls() (n int) {
	d.locked(func() {
		for _, c := range d.calls {
			n += c
		}
	})
	return n
}

func (d *Driver) locked(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

// call counts a call of op about sandbox id and returns the injected
// fault's error for it, if any.
func (d *Driver) call(op Op, id string) (err error) {
	d.locked(func() { err = d.callLocked(op, id) })
	return err
}

// callLocked is call with d.mu held.
func (d *Driver) callLocked(op Op, id string) error {
	d.calls[op]++
	n := d.calls[op]
	for _, f := range d.o.Faults {
		if f.Op != op || (f.Nth > 0 && f.Nth != n) || (f.Sandbox != "" && f.Sandbox != id) {
			continue
		}
		err := cmp.Or(f.Err, fmt.Errorf("injected failure: %w", drivers.ErrTransient))
		return fmt.Errorf("fake: %s (call %d): %w", strings.TrimSpace(op.String()+" "+id), n, err)
	}
	return nil
}
