package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// cutProxy forwards TCP connections on loopback to a server and cuts them
// all on demand.
type cutProxy struct {
	ln       net.Listener
	to       string
	mu       sync.Mutex
	conns    []net.Conn
	accepted int
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to}
	go func() {
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
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.accepted++
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close(); c.Close() }()
			go func() { io.Copy(c, up); up.Close(); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

// cut closes every connection through the proxy.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// PRP-5: connections cut while a task streams output are resumed; the
// stored output is byte-identical, no event lost or stored twice.
func TestOutputSurvivesCutConnections(t *testing.T) {
	t.Parallel()
	store := controller.NewMemoryStore()
	// 16 KiB chunks: the 2 MB of output make over a hundred events, so
	// that the cuts at events 3 to 15 come while it streams.
	s := newServer(t, serverOptions{Options: controller.WithLimits(controller.Options{Store: store}, prpwire.Welcome{MaxOutputChunk: 16 << 10})})
	proxy := newCutProxy(t, s.srv.Listener.Addr().String())
	s.url = "http://" + proxy.ln.Addr().String() + "/prp/"
	session := startRunner(t, s, prp.ScopeTask)
	ctx := context.Background()
	const lines = 300000
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "seq", Argv: []string{"seq", "1", strconv.Itoa(lines)}}); err != nil {
		t.Fatal(err)
	}
	cuts := 0
	for _, at := range []uint64{3, 6, 9, 12, 15} {
		deadline := time.Now().Add(time.Minute)
		for {
			n, err := store.LastEventSeq(ctx, session)
			if err != nil {
				t.Fatal(err)
			}
			if n >= at || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		proxy.cut()
		cuts++
	}
	res := wait(t, s, session, "c1")
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result = %+v, want exit 0", res)
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintln(&want, i)
	}
	got, err := s.c.Output(ctx, operator, session, "seq", prp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("stdout: %d bytes stored, want %d identical", len(got), want.Len())
	}
	evs, err := store.EventsAfter(ctx, session, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("stored event %d has seq %d: events lost or duplicated", i, e.Seq)
		}
	}
	proxy.mu.Lock()
	accepted := proxy.accepted
	proxy.mu.Unlock()
	if accepted < 2 {
		t.Errorf("the runner connected %d times through the proxy; the cuts cut nothing", accepted)
	}
	t.Logf("%d cuts, %d connections, %d events, %d bytes compared", cuts, accepted, len(evs), want.Len())
}

// PRP-2: the controller renews a connected runner's token before it
// expires, so that the runner reconnects after its first token's expiry.
func TestTokenIsRenewedWhileConnected(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	s := newServer(t, serverOptions{Options: controller.WithTokenTTL(controller.Options{}, ttl)})
	proxy := newCutProxy(t, s.srv.Listener.Addr().String())
	s.url = "http://" + proxy.ln.Addr().String() + "/prp/"
	session := startRunner(t, s, prp.ScopeTask)
	// Outlive the first token (waiting, not measuring), then cut.
	time.Sleep(2 * ttl)
	proxy.cut()
	ctx := context.Background()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"echo", "after"}}); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, s, session, "c1"); res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result after reconnecting past the first token's expiry = %+v, want exit 0", res)
	}
	if out, err := s.c.Output(ctx, operator, session, "t1", prp.Stdout); err != nil || string(out) != "after\n" {
		t.Errorf("output = %q, %v; want %q", out, err, "after\n")
	}
}
