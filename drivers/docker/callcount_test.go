package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
)

// callProxy is a counting proxy for the Engine API: a unix socket that
// forwards every connection to the real engine and records each HTTP
// request it carries ("METHOD /path", the API version prefix cut). A
// hijacked exec stream (101 UPGRADED) is forwarded as raw bytes both ways,
// with half-closes passed on.
type callProxy struct {
	host string // "unix://..." for the driver's host field

	mu    sync.Mutex
	calls []string
	// lose, if set, says which requests lose their answer: the proxy
	// forwards the request, reads the engine's answer and closes the
	// client's connection instead of passing the answer on.
	lose func(method, path string) bool
}

// startCallProxy listens on a socket in tb's temp dir and forwards to the
// engine at upstream (unix:// or tcp:// without TLS); it stops at cleanup.
func startCallProxy(tb testing.TB, upstream string) *callProxy {
	tb.Helper()
	network, addr, ok := strings.Cut(upstream, "://")
	if !ok || (network != "unix" && network != "tcp") {
		tb.Skipf("call proxy: engine host %q is neither unix:// nor tcp://", upstream)
	}
	sock := filepath.Join(tb.TempDir(), "engine.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	p := &callProxy{host: "unix://" + sock}
	var wg sync.WaitGroup
	var connsMu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns[c] = true
			connsMu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.serve(c, network, addr)
				connsMu.Lock()
				delete(conns, c)
				connsMu.Unlock()
			}()
		}
	}()
	tb.Cleanup(func() {
		_ = l.Close()
		connsMu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	return p
}

var apiVersion = regexp.MustCompile(`^/v[0-9.]+/`)

func (p *callProxy) serve(c net.Conn, network, addr string) {
	defer c.Close()
	up, err := net.Dial(network, addr)
	if err != nil {
		return
	}
	defer up.Close()
	cr, ur := bufio.NewReader(c), bufio.NewReader(up)
	for {
		req, err := http.ReadRequest(cr)
		if err != nil {
			return
		}
		path := apiVersion.ReplaceAllString(req.URL.Path, "/")
		p.mu.Lock()
		p.calls = append(p.calls, req.Method+" "+path)
		lose := p.lose != nil && p.lose(req.Method, path)
		p.mu.Unlock()
		if err := req.Write(up); err != nil {
			return
		}
		resp, err := http.ReadResponse(ur, req)
		if err != nil {
			return
		}
		if lose {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// The exec stream: the head, then raw bytes both ways.
			if _, err := fmt.Fprintf(c, "HTTP/1.1 %s\r\n", resp.Status); err != nil {
				return
			}
			_ = resp.Header.Write(c)
			_, _ = io.WriteString(c, "\r\n")
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = io.Copy(up, cr)
				if cw, ok := up.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
			}()
			_, _ = io.Copy(c, ur)
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			<-done
			return
		}
		err = resp.Write(c)
		_ = resp.Body.Close()
		if err != nil || resp.Close || req.Close {
			return
		}
	}
}

// take returns the calls recorded since the last take, /_ping (the API
// version negotiation, once per client) left out.
func (p *callProxy) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.calls {
		if !strings.HasSuffix(c, "/_ping") {
			out = append(out, c)
		}
	}
	p.calls = nil
	return out
}

// idPart replaces container and exec ids in a recorded call by {id}.
var idPart = regexp.MustCompile(`/[0-9a-f]{64}(/|$)`)

func shapes(calls []string) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = idPart.ReplaceAllString(c, "/{id}$1")
	}
	return out
}

// runLease runs one lease through drv: Acquire, Exec of "true", Release with
// Destroy, and checks the receipt proves the destroy.
func runLease(tb testing.TB, drv docker.Driver, cfg config.Config) drivers.Receipt {
	tb.Helper()
	ctx := context.Background()
	sb, err := drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "calls"})
	if err != nil {
		tb.Fatal(err)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("exec true: %v %+v", err, res)
	}
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		tb.Fatalf("destroy: %v %+v", err, r)
	}
	return r
}

// wantLeaseCalls is one lease with a cached pinned image: no image
// inspect before create, no inspect after the DELETE's 204.
var wantLeaseCalls = []string{
	"POST /containers/create",
	"POST /containers/{id}/start",
	"GET /containers/{id}/json",
	"POST /containers/{id}/exec",
	"POST /exec/{id}/start",
	"GET /exec/{id}/json",
	"DELETE /containers/{id}",
}

// TestEngineCallsPerLease counts, through a proxy in front of the real
// engine, the Engine API calls of one lease (Acquire, Exec "true",
// Release(Destroy)) on a pinned image: the first lease resolves the
// image (inspect, pull), every later one makes the 7 calls of
// wantLeaseCalls, and its receipt's evidence is the DELETE's 204. When the
// cached image is removed from the engine, create answers "No such image"
// and the driver resolves it again (pull) and creates once more; the lease
// after that is 7 calls again.
func TestEngineCallsPerLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startCallProxy(t, e.cli.DaemonHost())
	cfg := e.config(e.img.Ref, map[string]any{"host": p.host})

	first := p.take()
	runLease(t, e.drv, cfg)
	first = append(first, p.take()...)
	if !contains(first, "GET /images/"+e.img.Ref+"/json") || !contains(first, "POST /images/create") {
		t.Fatalf("first lease: want an image inspect and a pull, got %q", first)
	}
	for i := range 2 {
		r := runLease(t, e.drv, cfg)
		if got := shapes(p.take()); strings.Join(got, "\n") != strings.Join(wantLeaseCalls, "\n") {
			t.Fatalf("lease %d: %d Engine API calls %q, want %d %q", i+2, len(got), got, len(wantLeaseCalls), wantLeaseCalls)
		}
		if !strings.Contains(r.Evidence, "204") {
			t.Fatalf("receipt evidence %q does not name the DELETE's 204", r.Evidence)
		}
	}

	// Remove the image (its ID is this test's own: testimage adds a nonce).
	ctx := context.Background()
	ins, err := e.cli.ImageInspect(ctx, e.img.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ImageRemove(ctx, ins.ID, image.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	runLease(t, e.drv, cfg)
	again := shapes(p.take())
	if len(again) < 2 || again[0] != "POST /containers/create" || !contains(again, "POST /images/create") ||
		again[len(again)-1] != "DELETE /containers/{id}" {
		t.Fatalf("lease after the image was removed: want create, then the pull, then a second create: %q", again)
	}
	creates := 0
	for _, c := range again {
		if c == "POST /containers/create" {
			creates++
		}
	}
	if creates != 2 {
		t.Fatalf("lease after the image was removed: %d creates, want 2 (No such image, then after the pull): %q", creates, again)
	}
	runLease(t, e.drv, cfg)
	if got := shapes(p.take()); len(got) != len(wantLeaseCalls) {
		t.Fatalf("lease after the re-pull: %d calls %q, want %d", len(got), got, len(wantLeaseCalls))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDestroyAnswerLost: the engine removes the container, but its 204
// never reaches the driver (the proxy closes the connection instead).
// The outcome is unknown to the driver, so it does not take the DELETE
// for evidence: it inspects (or sends the DELETE again) until the engine
// answers "no such container", and the receipt says so.
func TestDestroyAnswerLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startCallProxy(t, e.cli.DaemonHost())
	cfg := e.config(e.img.Ref, map[string]any{"host": p.host})
	ctx := context.Background()
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	var lost sync.Once
	p.mu.Lock()
	p.lose = func(method, path string) bool {
		hit := false
		if method == http.MethodDelete && strings.HasPrefix(path, "/containers/") {
			lost.Do(func() { hit = true })
		}
		return hit
	}
	p.mu.Unlock()
	p.take()
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		t.Fatalf("destroy with its answer lost: %v %+v (calls %q)", err, r, p.take())
	}
	calls := shapes(p.take())
	if strings.Contains(r.Evidence, "204") {
		t.Fatalf("receipt evidence %q claims the 204 the driver never got (calls %q)", r.Evidence, calls)
	}
	if len(calls) < 2 || calls[0] != "DELETE /containers/{id}" {
		t.Fatalf("calls %q: want the DELETE, then an inspect or a second DELETE", calls)
	}
	t.Logf("evidence %q after calls %q", r.Evidence, calls)
	if _, err := e.cli.ContainerInspect(ctx, sb.ID()); err == nil {
		t.Fatalf("container %s still exists after a confirmed destroy", sb.ID())
	}
}

// A create whose answer is lost (the engine made the container; the
// proxy closes the connection instead of passing the 201 on) fails
// Acquire, and the container the record never learned of is removed: it
// carries the lease's labels and would otherwise be left running for
// nothing to find. Found as a warm-pool member left after a delete, its
// create cut off by the System's Close under load.
func TestCreateAnswerLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startCallProxy(t, e.cli.DaemonHost())
	cfg := e.config(e.img.Ref, map[string]any{"host": p.host})
	ctx := context.Background()
	var lost sync.Once
	p.mu.Lock()
	p.lose = func(method, path string) bool {
		hit := false
		if method == http.MethodPost && path == "/containers/create" {
			lost.Do(func() { hit = true })
		}
		return hit
	}
	p.mu.Unlock()
	mark := "create-lost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lost", Labels: map[string]string{"test.berth/lost": mark}})
	if err == nil {
		_, _ = sb.Release(ctx, drivers.Destroy)
		t.Fatal("Acquire succeeded although the create's answer was lost")
	}
	// The second create of the name is refused (the first made it), and
	// the container is removed by its name.
	calls := p.take()
	if n := len(calls); n < 3 || calls[n-3] != "POST /containers/create" || calls[n-2] != "POST /containers/create" ||
		!strings.HasPrefix(calls[n-1], "DELETE /containers/berth-") {
		t.Errorf("calls %q: want the lost create, a create of the same name, and a removal by name", calls)
	}
	left, lerr := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "test.berth/lost="+mark))})
	if lerr != nil || len(left) != 0 {
		t.Fatalf("containers of the lost create left: %d (%v); Acquire said %v", len(left), lerr, err)
	}
	t.Logf("Acquire: %v; calls %q", err, calls)
}

// A sandbox acquired from a pinned reference reports its image identity
// without an Engine API call (Acquire proved it: issue 56, a warm pool's
// adoption), and it is the identity the engine reports for the same
// container read afresh (a resumed handle inspects the container and the
// image).
func TestPinnedIdentityWithoutCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startCallProxy(t, e.cli.DaemonHost())
	cfg := e.config(e.img.Ref, map[string]any{"host": p.host})
	ctx := context.Background()
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "pinned"})
	p.take()
	got, err := sb.(drivers.ImageReporter).ImageIdentity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls := p.take(); len(calls) != 0 {
		t.Errorf("ImageIdentity of a pinned acquisition made Engine API calls %q, want none", calls)
	}
	resumed, err := e.drv.Resume(ctx, cfg, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	read, err := resumed.(drivers.ImageReporter).ImageIdentity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls := shapes(p.take()); !contains(calls, "GET /containers/{id}/json") {
		t.Errorf("a resumed handle's ImageIdentity did not read the engine: %q", calls)
	}
	if got != read || got.Digest() != strings.SplitN(e.img.Ref, "@", 2)[1] {
		t.Errorf("proven identity %s, read from the engine %s, pinned %s", got, read, e.img.Ref)
	}
}

// Under gVisor (issue 56) a lease makes the same 7 Engine API calls as
// under runc: the check of the container's runtime reads the inspect that
// waits for it to run, and the exec's exit is read once.
func TestEngineCallsPerLeaseRunsc(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	requireRunsc(t, e)
	p := startCallProxy(t, e.cli.DaemonHost())
	cfg := e.config(e.img.Ref, map[string]any{"host": p.host, "runtime": "runsc", "network": "none"})
	runLease(t, e.drv, cfg)
	p.take()
	for i := range 2 {
		runLease(t, e.drv, cfg)
		if got := shapes(p.take()); strings.Join(got, "\n") != strings.Join(wantLeaseCalls, "\n") {
			t.Fatalf("runsc lease %d: %d Engine API calls %q, want %d %q", i+2, len(got), got, len(wantLeaseCalls), wantLeaseCalls)
		}
	}
}
