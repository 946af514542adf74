package controller_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/runner"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/qualification"
)

// The chaos test's knobs: go test ./internal/controller -run Chaos -args
// -chaos.cuts=1000 -chaos.seed=7 -chaos.lines=1800000.
var (
	chaosCuts  = flag.Int("chaos.cuts", 1000, "connections the chaos test cuts at seeded byte counts")
	chaosSeed  = flag.Uint64("chaos.seed", 1, "seed of the chaos test's cut byte counts")
	chaosLines = flag.Int("chaos.lines", 1800000, "lines of `seq 1 N` the chaos test's task prints (1800000: about 13 MiB, enough for 1000 cuts with binary output frames)")
)

// byteCutProxy forwards TCP connections on loopback to a server. Once
// armed, it cuts each connection when the runner-to-controller direction
// has carried a seeded number of bytes (drawn from [minGap, maxGap) with a
// seeded generator, one draw per connection), until it has cut cuts
// connections; after that it only forwards. Cuts depend on byte counts
// alone, never on timers.
type byteCutProxy struct {
	ln             net.Listener
	to             string
	minGap, maxGap int

	mu       sync.Mutex
	rng      *rand.Rand
	armed    bool
	left     int // cuts still to make
	cuts     int // cuts made
	accepted int
	total    int64 // runner-to-controller bytes forwarded since armed
	live     map[*cutConn]struct{}
}

// cutConn is one proxied connection and its byte budget (0: no cut).
type cutConn struct {
	down, up net.Conn
	budget   int
	sent     int
	drawn    bool // whether budget was drawn
}

func newByteCutProxy(t *testing.T, to string, seed uint64, cuts, minGap, maxGap int) *byteCutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &byteCutProxy{ln: ln, to: to, minGap: minGap, maxGap: maxGap, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), left: cuts, live: map[*cutConn]struct{}{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			cc := &cutConn{down: c, up: up}
			p.mu.Lock()
			p.accepted++
			p.live[cc] = struct{}{}
			p.mu.Unlock()
			wg.Go(func() { p.forward(cc) })
			wg.Go(func() { io.Copy(c, up); p.close(cc) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for cc := range p.live {
			cc.down.Close()
			cc.up.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

// drawLocked gives cc its seeded budget, once, if cuts are left. Budgets
// are drawn when a connection first carries bytes after arming, so that an
// idle connection (the ticket exchange's, kept alive) takes none.
func (p *byteCutProxy) drawLocked(cc *cutConn) {
	if !p.armed || cc.drawn {
		return
	}
	cc.drawn = true
	if p.left > 0 {
		cc.budget = p.minGap + p.rng.IntN(p.maxGap-p.minGap)
		p.left--
	}
}

// arm starts cutting: connections already open count their bytes from now
// on.
func (p *byteCutProxy) arm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
	for cc := range p.live {
		cc.sent = 0
	}
}

func (p *byteCutProxy) close(cc *cutConn) {
	cc.down.Close()
	cc.up.Close()
	p.mu.Lock()
	delete(p.live, cc)
	p.mu.Unlock()
}

// forward copies runner-to-controller bytes and cuts the connection in the
// middle of whatever frame carries its budget's last byte.
func (p *byteCutProxy) forward(cc *cutConn) {
	defer p.close(cc)
	buf := make([]byte, 32<<10)
	for {
		n, err := cc.down.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.drawLocked(cc)
			m, cut := n, false
			if cc.budget > 0 && cc.sent+n >= cc.budget {
				m, cut = cc.budget-cc.sent, true
			}
			cc.sent += m
			if p.armed {
				p.total += int64(m)
			}
			p.mu.Unlock()
			if _, werr := cc.up.Write(buf[:m]); werr != nil {
				return
			}
			if cut {
				p.mu.Lock()
				p.cuts++
				p.mu.Unlock()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forwarded returns the runner-to-controller bytes forwarded since armed.
func (p *byteCutProxy) forwarded() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

func (p *byteCutProxy) counts() (cuts, accepted int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts, p.accepted
}

// PRP-5 under chaos: a task prints a known sequence while the proxy
// between runner and controller cuts the connection at seeded byte counts
// (1000 by default, -chaos.cuts); the runner reconnects with no backoff
// and resumes. The stored output is byte-identical and the stored events'
// seqs are contiguous from 1 (none lost, none stored twice).
func TestChaosCutsAtSeededByteCounts(t *testing.T) {
	store := controller.NewMemoryStore()
	// 4 KiB output chunks make frames of about 5.6 KiB, so that every
	// connection's budget (8 to 24 KiB) carries at least one whole event
	// past the upgrade and the hello: each connection makes progress.
	s := newServer(t, serverOptions{Options: controller.WithLimits(controller.Options{Store: store}, prpwire.Welcome{MaxOutputChunk: 4 << 10})})
	proxy := newByteCutProxy(t, s.srv.Listener.Addr().String(), *chaosSeed, *chaosCuts, 8<<10, 24<<10)
	s.url = "http://" + proxy.ln.Addr().String() + "/prp/"

	plat, err := runner.DefaultPlatform(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	r, err := runner.New(s.URL(), t.TempDir(), &runner.Options{Lease: "lease-1", Ticket: s.ticket(t, prp.ScopeTask),
		BinarySHA256: strings.Repeat("ab", 32), StopGrace: 2 * time.Second,
		Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Backoff:  func(int) time.Duration { return 0 },
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
	session := waitSession(t, s)
	// The ticket exchange is done; from here on every connection is cut.
	proxy.arm()

	lines := *chaosLines
	if _, err := s.c.StartTask(context.Background(), operator, session, "c1", prp.TaskStart{TaskID: "seq", Argv: []string{"seq", "1", strconv.Itoa(lines)}}); err != nil {
		t.Fatal(err)
	}
	res := wait(t, s, session, "c1")
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result = %+v, want exit 0", res)
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintln(&want, i)
	}
	got, err := s.c.Output(context.Background(), operator, session, "seq", prp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		n := 0
		for n < len(got) && n < want.Len() && got[n] == want.Bytes()[n] {
			n++
		}
		t.Errorf("stdout: %d bytes stored, want %d identical; first difference at byte %d", len(got), want.Len(), n)
	}
	evs, err := store.EventsAfter(context.Background(), session, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("stored event %d has seq %d: events lost or duplicated", i, e.Seq)
		}
	}
	cuts, accepted := proxy.counts()
	if cuts == 0 {
		t.Fatal("the proxy cut no connection")
	}
	t.Logf("seed %d: %d cuts at seeded byte counts (of %d asked), %d connections, %d events contiguous, %d bytes compared",
		*chaosSeed, cuts, *chaosCuts, accepted, len(evs), want.Len())
	if cuts < *chaosCuts {
		t.Logf("the task ended before all %d cuts were made; raise -chaos.lines for more", *chaosCuts)
	}
}
