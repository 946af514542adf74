package controller_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
)

// hasResult reports whether evs hold the result event of command id.
func hasResult(evs []controller.EventRecord, id string) bool {
	for _, r := range evs {
		if r.Event.Kind == prp.EventResult && r.Event.Result != nil && r.Event.Result.CommandID == id {
			return true
		}
	}
	return false
}

// heldCommitStore is a real SQL runner store whose group commit of the
// batch holding command cmd's result waits until open is closed (held is
// closed when it starts waiting): a connection can be cut while that
// batch is queued or being committed. A welcome's LastEventSeq read while
// the commit is held waits for it, as a store that serializes its writes
// would; ReleaseConnection reports on released.
type heldCommitStore struct {
	controller.RunnerStore
	gi  controller.GroupIntaker
	cmd string

	once                  sync.Once
	held, open, committed chan struct{}
	released              chan struct{}
}

func (s *heldCommitStore) PutIntake(ctx context.Context, bs []controller.IntakeBatch) error {
	gate := false
	for _, b := range bs {
		if hasResult(b.Events, s.cmd) {
			s.once.Do(func() { gate = true })
		}
	}
	if !gate {
		return s.gi.PutIntake(ctx, bs)
	}
	close(s.held)
	<-s.open
	defer close(s.committed)
	return s.gi.PutIntake(ctx, bs)
}

func (s *heldCommitStore) LastEventSeq(ctx context.Context, session string) (uint64, error) {
	select {
	case <-s.held:
		<-s.committed
	default:
	}
	return s.RunnerStore.LastEventSeq(ctx, session)
}

func (s *heldCommitStore) ReleaseConnection(ctx context.Context, session, conn string) error {
	select {
	case s.released <- struct{}{}:
	default:
	}
	return s.RunnerStore.ReleaseConnection(ctx, session, conn)
}

// issue 55: a connection cut while the group commit of its batch with a
// task's result is under way. The runner is welcomed back from the events
// the store holds, which include the result, so it never sends it again:
// the command must be complete all the same, or a Wait for it (Task.Wait
// of a task without writers waits for the result, controller.Wait here)
// never returns. The intake used to give up on the batch when the
// connection ended (the commit went on) and complete the result after it,
// never.
func TestResultOfABatchCommittedAsItsConnectionDropsIsComplete(t *testing.T) {
	t.Parallel()
	st := openStores(t, "sqlite://"+filepath.Join(t.TempDir(), "c.db"))
	rs := st.Runners.(interface{ UnsealStore() controller.RunnerStore }).UnsealStore()
	gi, ok := rs.(controller.GroupIntaker)
	if !ok {
		t.Fatalf("the SQLite runner store %T has no group intake", rs)
	}
	hs := &heldCommitStore{RunnerStore: rs, gi: gi, cmd: "c1", held: make(chan struct{}), open: make(chan struct{}),
		committed: make(chan struct{}), released: make(chan struct{}, 1)}
	s := newServer(t, serverOptions{Options: controller.Options{Store: hs}})
	proxy := newCutProxy(t, s.srv.Listener.Addr().String())
	s.url = "http://" + proxy.ln.Addr().String() + "/prp/"
	session := startRunner(t, s, prp.ScopeTask)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"echo", "hi"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hs.held:
	case <-ctx.Done():
		t.Fatal("the result's batch never reached the group commit")
	}
	// Drain a release of the connection before the cut (none is expected).
	select {
	case <-hs.released:
	default:
	}
	proxy.cut()
	// The connection ends before its batch is committed if the intake
	// gives up on it; if the intake waits for the commit (as it must) it
	// does not, and the commit goes on after a while.
	select {
	case <-hs.released:
		t.Log("the connection ended while its batch was held")
	case <-time.After(2 * time.Second):
	}
	close(hs.open)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	res, err := s.c.Wait(wctx, operator, session, "c1")
	if err != nil {
		t.Fatalf("Wait for the task whose result was committed as its connection dropped: %v", err)
	}
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Errorf("result = %+v, want exit 0", res)
	}
	proxy.mu.Lock()
	accepted := proxy.accepted
	proxy.mu.Unlock()
	if accepted < 2 {
		t.Errorf("the runner connected %d times: the cut cut nothing", accepted)
	}
}

// failCompleteStore is a memory runner store (no group intake: events,
// then results, then usage, each its own write) whose first
// CompleteCommand of command cmd fails: a crash or a store failure
// between the events' write and the result's.
type failCompleteStore struct {
	controller.Store
	cmd    string
	failed bool
	mu     sync.Mutex
}

var errInjected = errors.New("injected: the store failed between the events and the result")

func (s *failCompleteStore) CompleteCommand(ctx context.Context, session string, res prp.Result, now time.Time) (controller.CommandRecord, error) {
	s.mu.Lock()
	fail := res.CommandID == s.cmd && !s.failed
	s.failed = s.failed || fail
	s.mu.Unlock()
	if fail {
		return controller.CommandRecord{}, errInjected
	}
	return s.Store.CompleteCommand(ctx, session, res, now)
}

// issue 55: the result event is stored, its command's completion failed
// (the connection is closed: "store unavailable"), and the runner,
// welcomed back from the stored events, never sends it again: the
// controller completes the command from the stored event when the
// session connects again.
func TestResultStoredWithoutItsCompletionIsCompletedOnReconnect(t *testing.T) {
	t.Parallel()
	fs := &failCompleteStore{Store: controller.NewMemoryStore(), cmd: "c1"}
	s := newServer(t, serverOptions{Options: controller.Options{Store: fs}})
	session := startRunner(t, s, prp.ScopeTask)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"echo", "hi"}}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	res, err := s.c.Wait(wctx, operator, session, "c1")
	if err != nil {
		t.Fatalf("Wait for the task whose result's completion failed once: %v", err)
	}
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Errorf("result = %+v, want exit 0", res)
	}
	fs.mu.Lock()
	failed := fs.failed
	fs.mu.Unlock()
	if !failed {
		t.Error("the injected failure never happened")
	}
}
