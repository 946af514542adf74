package lease

import (
	"fmt"
	"sync"
)

// flights coalesces a manager's acquisitions of one reuse or run key
// (LEASE-8; across processes the store does): the first caller starts the
// key's flight, and every caller that comes while it is in the air gets
// its outcome.
//
// A flight runs in the calling goroutine (do), for a caller whose context
// never ends and would wait for it anyway, or on a runner goroutine
// (start), so that each caller can stop waiting when its own context ends
// while the flight goes on for the others. Runners are kept parked between
// flights (at most maxIdleRunners): handing a flight to one whose stack has
// grown already costs about half of what starting a goroutine for it does
// (go test ./lease -bench 'AcquireRelease$': ctx=cancellable).
type flights struct {
	mu     sync.Mutex
	m      map[string]*flight // the flights in the air, by key
	idle   []chan func()      // the parked runners, each waiting on its own channel
	closed bool               // no runner parks any more (close)
}

// flight is the acquisition of one key; h and err are set when done is
// closed.
type flight struct {
	done  chan struct{}
	h     *Handle
	err   error
	joins int // callers that joined it after it started; guarded by flights.mu
}

// maxIdleRunners bounds the runners parked between flights; a runner
// that finishes a flight when as many are parked exits.
const maxIdleRunners = 8

// register adds a new flight for key, which must have none; fs.mu is held.
func (fs *flights) register(key string) *flight {
	f := &flight{done: make(chan struct{})}
	if fs.m == nil {
		fs.m = map[string]*flight{}
	}
	fs.m[key] = f
	return f
}

// do returns the outcome of key's flight: it waits for the one in the
// air, or flies fn in the calling goroutine for whoever joins meanwhile.
func (fs *flights) do(key string, fn func() (*Handle, error)) (*Handle, error) {
	fs.mu.Lock()
	if f := fs.m[key]; f != nil {
		f.joins++
		fs.mu.Unlock()
		<-f.done
		return f.h, f.err
	}
	f := fs.register(key)
	fs.mu.Unlock()
	fs.fly(key, f, fn)
	return f.h, f.err
}

// start returns key's flight: the one in the air, or a new one that flies
// fn on a runner. The flight is registered when start returns (a caller
// that comes next joins it); the caller waits on its done channel for as
// long as it likes.
func (fs *flights) start(key string, fn func() (*Handle, error)) *flight {
	fs.mu.Lock()
	if f := fs.m[key]; f != nil {
		f.joins++
		fs.mu.Unlock()
		return f
	}
	f := fs.register(key)
	var runner chan func()
	if n := len(fs.idle); n > 0 {
		runner, fs.idle = fs.idle[n-1], fs.idle[:n-1]
	}
	fs.mu.Unlock()
	job := func() { fs.fly(key, f, fn) }
	if runner != nil {
		runner <- job // buffered: the runner may not be receiving yet
	} else {
		go fs.run(job)
	}
	return f
}

// fly runs fn for flight f of key and lands it: the key is free for a new
// flight before f's callers are told. If fn panics or exits its goroutine,
// the callers get an error and the panic goes on in this goroutine.
func (fs *flights) fly(key string, f *flight, fn func() (*Handle, error)) {
	landed := false
	defer func() {
		if !landed {
			f.h, f.err = nil, fmt.Errorf("lease: the shared acquisition of %s did not return (it panicked)", key)
		}
		fs.mu.Lock()
		if fs.m[key] == f {
			delete(fs.m, key)
		}
		fs.mu.Unlock()
		close(f.done)
	}()
	f.h, f.err = fn()
	landed = true
}

// run is a runner: it runs job, then parks for the next one unless
// maxIdleRunners are parked already or the flights are closed.
func (fs *flights) run(job func()) {
	var next chan func()
	for job != nil {
		job()
		fs.mu.Lock()
		if fs.closed || len(fs.idle) >= maxIdleRunners {
			fs.mu.Unlock()
			return
		}
		if next == nil {
			next = make(chan func(), 1)
		}
		fs.idle = append(fs.idle, next)
		fs.mu.Unlock()
		job = <-next // nil once closed
	}
}

// close ends the parked runners; flights in the air land as they do, and
// a flight started afterwards gets a runner that exits after it.
func (fs *flights) close() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.closed = true
	for _, r := range fs.idle {
		close(r)
	}
	fs.idle = nil
}

// parked returns how many runners are parked (tests).
func (fs *flights) parked() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.idle)
}
