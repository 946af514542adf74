package controller_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/runner"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/qualification"
)

// switchProxy forwards TCP connections on loopback to the address in to;
// cut closes every forwarded connection, so that the runner reconnects,
// through the proxy, to whatever to names then.
type switchProxy struct {
	ln net.Listener
	to atomic.Value // string

	mu   sync.Mutex
	live map[net.Conn]struct{}
}

func newSwitchProxy(t *testing.T, to string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, live: map[net.Conn]struct{}{}}
	p.to.Store(to)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.to.Load().(string))
			if err != nil {
				down.Close()
				continue
			}
			p.mu.Lock()
			p.live[down], p.live[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						if _, err := dst.Write(buf[:n]); err != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				down.Close()
				up.Close()
			}
			wg.Go(func() { pipe(up, down) })
			wg.Go(func() { pipe(down, up) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		wg.Wait()
	})
	return p
}

// switchTo sends new connections to addr and cuts the open ones.
func (p *switchProxy) switchTo(addr string) {
	p.to.Store(addr)
	p.cut()
}

func (p *switchProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.live {
		c.Close()
		delete(p.live, c)
	}
}

// PRP-4, persistence: two controller replicas on one PostgreSQL store
// never run one command twice. Both dispatch the same command id at once
// (five ids, sixteen callers each)
// while the real runner is connected to one of them: one journals it, the
// other gets the journaled record, and the task (which appends a line to a
// file) runs once. The runner then moves to the other replica (the
// connection is cut and it reconnects there): it resumes the session, a
// redispatch on either replica returns the stored result marked
// duplicate, and a new command dispatched on the replica it left reaches
// it through the store and also runs once.
func TestTwoReplicasOnOnePostgreSQLNeverRunACommandTwice(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	signer := testSigner(t)
	// One data directory for both, as on a shared volume: either replica
	// reads the output the other stored.
	dataDir := t.TempDir()
	replica := func() *server {
		db := openStores(t, url)
		return newServer(t, serverOptions{Signer: signer, Options: controller.Options{Tickets: db.Runners.(controller.RunnerStore), Store: db.Runners.(controller.RunnerStore), DataDir: dataDir}})
	}
	a, b := replica(), replica()
	addr := func(s *server) string { return s.srv.Listener.Addr().String() }
	proxy := newSwitchProxy(t, addr(a))

	plat, err := runner.DefaultPlatform(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	r, err := runner.New("http://"+proxy.ln.Addr().String()+"/prp/", t.TempDir(), &runner.Options{Lease: "lease-1", Ticket: a.ticket(t, prp.ScopeTask),
		BinarySHA256: strings.Repeat("ab", 32), StopGrace: 2 * time.Second,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Backoff:  func(int) time.Duration { return 20 * time.Millisecond },
		Platform: func(context.Context) (qualification.Platform, error) { return plat, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = r.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if runErr != nil && !errors.Is(runErr, context.Canceled) {
			t.Errorf("runner: %v", runErr)
		}
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.String())
		}
	})
	session := waitSession(t, a)

	ran := filepath.Join(t.TempDir(), "ran")
	appendLine := func(line string) prp.TaskStart {
		return prp.TaskStart{TaskID: line, Argv: []string{"sh", "-c", `echo "$1" >> "$2"; echo "out $1"`, "sh", line, ran}}
	}
	lines := func() []string {
		b, err := os.ReadFile(ran)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}

	// Race, five times: both replicas, eight callers each, one command id.
	const rounds, callers = 5, 8
	var want []string
	for round := 1; round <= rounds; round++ {
		id, task := fmt.Sprintf("once-%d", round), fmt.Sprintf("t%d", round)
		type answer struct {
			rec controller.CommandRecord
			err error
		}
		answers := make(chan answer, 2*callers)
		var start, racers sync.WaitGroup
		start.Add(1)
		for i := range 2 * callers {
			s := []*server{a, b}[i%2]
			racers.Go(func() {
				start.Wait()
				rec, err := s.c.StartTask(context.Background(), operator, session, id, appendLine(task))
				answers <- answer{rec, err}
			})
		}
		start.Done()
		racers.Wait()
		close(answers)
		seqs := map[uint64]bool{}
		for ans := range answers {
			if ans.err != nil {
				t.Fatalf("StartTask %s raced on two replicas: %v", id, ans.err)
			}
			seqs[ans.rec.Seq] = true
		}
		if len(seqs) != 1 {
			t.Errorf("the racing dispatches journaled command %s under seqs %v, want one", id, seqs)
		}
		res := wait(t, []*server{a, b}[round%2], session, id) // b reads what a's runner reported, through the store
		if res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 0 {
			t.Fatalf("result of %s = %+v, want done with exit 0", id, res)
		}
		want = append(want, task)
	}
	if got := lines(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the tasks ran as %v, want %v, each once", got, want)
	}

	// The runner moves to replica b and resumes the session there.
	proxy.switchTo(addr(b))
	waitConnected(t, b, session)
	for _, s := range []*server{a, b} {
		rec, err := s.c.StartTask(context.Background(), operator, session, "once-1", appendLine("t1"))
		if err != nil || rec.Result == nil || !rec.Result.Duplicate || rec.Result.Status != prp.ResultDone {
			t.Errorf("redispatch after the move = %+v, %v; want the stored result marked duplicate", rec, err)
		}
	}
	// A command journaled on the replica the runner left reaches it
	// through the store, once, also when both replicas dispatch it.
	for _, s := range []*server{a, b, a} {
		if _, err := s.c.StartTask(context.Background(), operator, session, "second", appendLine("second")); err != nil {
			t.Fatal(err)
		}
	}
	if res := wait(t, a, session, "second"); res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result of the second command = %+v, want done with exit 0", res)
	}
	// Redelivery: cut again (back to a); nothing runs twice.
	proxy.switchTo(addr(a))
	waitConnected(t, a, session)
	if res := wait(t, a, session, "second"); res.Status != prp.ResultDone {
		t.Fatalf("result of the second command after the move back = %+v", res)
	}
	// Output stored on a after b stored some in the same chunk file.
	if _, err := a.c.StartTask(context.Background(), operator, session, "third", appendLine("third")); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, b, session, "third"); res.Status != prp.ResultDone {
		t.Fatalf("result of the third command = %+v", res)
	}
	want = append(want, "second", "third")
	if got := lines(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the tasks ran as %v, want %v, each once", got, want)
	}
	for _, task := range want {
		for name, s := range map[string]*server{"a": a, "b": b} {
			out, err := s.c.Output(context.Background(), operator, session, task, prp.Stdout)
			if err != nil || string(out) != "out "+task+"\n" {
				t.Errorf("replica %s: stdout of %s = %q, %v; want %q", name, task, out, err, "out "+task+"\n")
			}
		}
	}
	evs, err := a.c.Tasks(context.Background(), operator, session)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the moves: %d tasks known, file %v", len(evs), lines())
}

// waitConnected waits until the runner of session is connected to s.
func waitConnected(t *testing.T, s *server, session string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !s.c.Connected(session) {
		if time.Now().After(deadline) {
			t.Fatalf("the runner of session %s did not connect within a minute", session)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
