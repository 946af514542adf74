package ssh

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
)

// PRB-2: strict host key checking against the real sshd. Each refusal names
// host, port and the offered key's fingerprint.
func TestHostKeyRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name    string
		known   []any
		want    error
		trusted int
	}{
		{"unknown host key is refused", []any{}, drivers.ErrHostKeyUnknown, 0},
		{"key for another port is unknown", []any{strings.Replace(e.srv.KnownHostsLine(), ":"+strconv.Itoa(e.srv.Port()), ":1", 1)}, drivers.ErrHostKeyUnknown, 0},
		{"mismatched host key is refused", []any{e.srv.MismatchedKnownHostsLine()}, drivers.ErrHostKeyMismatch, 1},
		{"trusted key of a type the server lacks is a mismatch", []any{ecdsaLine(t, e.srv.Addr())}, drivers.ErrHostKeyMismatch, 1},
		{"revoked host key is refused", []any{e.srv.KnownHostsLine(), "@revoked * " + strings.SplitN(e.srv.KnownHostsLine(), " ", 2)[1]}, drivers.ErrHostKeyMismatch, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := e.config(t, func(m map[string]any) { m[fieldKnownHosts] = tc.known })
			sb, err := e.d.Acquire(testCtx(t), cfg, drivers.AcquireRequest{})
			if err == nil {
				sb.Release(context.Background(), drivers.Destroy)
				t.Fatal("Acquire succeeded; want a host key refusal")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v; want %v", err, tc.want)
			}
			var hk *hostKeyError
			if !errors.As(err, &hk) {
				t.Fatalf("error %T is not a *hostKeyError", err)
			}
			if hk.Fingerprint != e.srv.HostKeyFingerprint() || hk.Host != e.srv.Host() || hk.Port != e.srv.Port() || len(hk.Trusted) != tc.trusted {
				t.Errorf("hostKeyError %+v; want fingerprint %s for %s", hk, e.srv.HostKeyFingerprint(), e.srv.Addr())
			}
			for _, s := range []string{e.srv.Addr(), e.srv.HostKeyFingerprint()} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

// PRB-2: trust on first use is an explicit operation returning the key.
func TestScanHostKeyReturnsTheOfferedKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	line, fp, err := ScanHostKey(testCtx(t), e.srv.Host(), e.srv.Port())
	if err != nil {
		t.Fatalf("ScanHostKey: %v", err)
	}
	if diff := cmp.Diff(e.srv.KnownHostsLine(), line); diff != "" {
		t.Errorf("line (-want +got):\n%s", diff)
	}
	if fp != e.srv.HostKeyFingerprint() {
		t.Errorf("fingerprint %s; want %s", fp, e.srv.HostKeyFingerprint())
	}
	// The scanned line, once saved, lets the driver connect.
	sb := e.acquire(t, e.config(t, func(m map[string]any) { m[fieldKnownHosts] = []any{line} }))
	if sb.Cwd() == "" {
		t.Error("empty cwd")
	}
	// Scanning a closed port is unreachable.
	if _, _, err := ScanHostKey(testCtx(t), "127.0.0.1", closedPort(t)); !errors.Is(err, drivers.ErrUnreachable) {
		t.Errorf("scan of closed port: %v; want ErrUnreachable", err)
	}
}

func TestWrongClientKeyIsErrAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(t, func(m map[string]any) { m[fieldPrivateKey] = e.srv.UnauthorizedKeyPEM() })
	_, err := e.d.Acquire(testCtx(t), cfg, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrAuth) {
		t.Fatalf("error %v; want ErrAuth", err)
	}
	if reason.Of(err) != reason.AuthFailed {
		t.Errorf("code %s", reason.Of(err))
	}
}

// ecdsaLine is a known_hosts line trusting a fresh ECDSA key for addr.
func ecdsaLine(t *testing.T, addr string) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := xssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return knownhosts.Line([]string{addr}, pub)
}

func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return p
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("refused port is unreachable without waiting for the timeout", func(t *testing.T) {
		t.Parallel()
		// A long connect_timeout and caller deadline: the error must come
		// from the refused connection, not from a timer.
		cfg := e.config(t, func(m map[string]any) {
			m[fieldPort] = closedPort(t)
			m[fieldConnectTimeout] = "10m"
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		_, err := e.d.Acquire(ctx, cfg, drivers.AcquireRequest{})
		if !errors.Is(err, drivers.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			t.Fatalf("error %v; want ErrUnreachable from a refused connection", err)
		}
		if got := reason.Of(err); got != reason.Unreachable {
			t.Errorf("CodeOf = %s, want %s (PRB-5)", got, reason.Unreachable)
		}
	})
	t.Run("silent server hits connect_timeout: code timeout (PRB-5)", func(t *testing.T) {
		t.Parallel()
		cfg := e.config(t, func(m map[string]any) {
			m[fieldPort] = testenv.SilentListener(t)
			m[fieldConnectTimeout] = "200ms"
		})
		_, err := e.d.Acquire(testCtx(t), cfg, drivers.AcquireRequest{})
		if !errors.Is(err, drivers.ErrTimeout) || reason.Of(err) != reason.Timeout {
			t.Fatalf("error %v (code %s); want ErrTimeout, code timeout", err, reason.Of(err))
		}
	})
	t.Run("dial honours cancellation", func(t *testing.T) {
		t.Parallel()
		cfg := e.config(t, func(m map[string]any) {
			m[fieldPort] = testenv.SilentListener(t)
			m[fieldConnectTimeout] = "10m"
		})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := e.d.Acquire(ctx, cfg, drivers.AcquireRequest{})
			errc <- err
		}()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v; want context.Canceled", err)
		}
	})
}

// Connections are pooled per config and reference counted; a broken one is
// redialed once.
func TestConnectionPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(t, nil)
	a := e.acquire(t, cfg)
	b := e.acquire(t, cfg)
	if a.c != b.c {
		t.Fatal("two leases of one config do not share the connection")
	}
	other := e.acquire(t, e.config(t, func(m map[string]any) { m[fieldKeepalive] = "1m" }))
	if other.c == a.c {
		t.Fatal("different configs share a connection")
	}
	if a.ID() == b.ID() {
		// Both use the same workdir, so the ids are equal only if the
		// workdir is: check the format instead.
		want := "ssh://" + e.srv.User() + "@" + e.srv.Addr() + a.Cwd()
		if a.ID() != want {
			t.Errorf("id %q; want %q", a.ID(), want)
		}
	}

	// Break the connection under both leases: the next exec redials once.
	a.c.mu.Lock()
	gen := a.c.gen
	a.c.client.Close()
	a.c.mu.Unlock()
	res, err := b.Exec(testCtx(t), drivers.Command{Argv: []string{"echo", "ok"}})
	if err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("exec after broken connection: %v %+v", err, res)
	}
	a.c.mu.Lock()
	if a.c.gen != gen+1 {
		t.Errorf("generation %d; want %d (one redial)", a.c.gen, gen+1)
	}
	a.c.mu.Unlock()

	// Releasing one lease keeps the connection for the other.
	if _, err := a.Release(testCtx(t), drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(testCtx(t), drivers.Command{Argv: []string{"true"}}); err != nil {
		t.Fatalf("exec on the remaining lease: %v", err)
	}
	if _, err := b.Release(testCtx(t), drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	e.d.pool.mu.Lock()
	_, still := e.d.pool.conns[cfgKey(t, e, cfg)]
	e.d.pool.mu.Unlock()
	if still || !b.c.closed {
		t.Error("connection still pooled after its last lease was released")
	}
}

func cfgKey(t *testing.T, e *env, cfg config.Config) string {
	tg, err := parseTarget(e.d.Schema(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tg.poolKey
}

// A connection the server dropped is redialed once by the next command;
// keepalive requests leave a healthy connection alone.
func TestServerDroppedConnectionIsRedialed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, func(m map[string]any) { m[fieldKeepalive] = "20ms" }))
	ctx := testCtx(t)
	for range 3 {
		time.Sleep(30 * time.Millisecond) // let keepalives run against the real server
		if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	sb.c.mu.Lock()
	gen := sb.c.gen
	sb.c.mu.Unlock()
	if gen != 0 {
		t.Fatalf("healthy connection was redialed %d times", gen)
	}
	// Drop every connection at the server: kill the per-connection sshd
	// processes, children of the listener.
	if _, err := exec.LookPath("pkill"); err != nil {
		testenv.Missing(t, "procps (pgrep, pkill)", "apt-get install procps", err)
	}
	if out, err := exec.Command("pkill", "-KILL", "-P", strconv.Itoa(e.srv.PID())).CombinedOutput(); err != nil {
		t.Fatalf("pkill: %v %s", err, out)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "back"}})
	if err != nil || string(res.Stdout) != "back\n" {
		t.Fatalf("exec after the server dropped the connection: %v %+v", err, res)
	}
	sb.c.mu.Lock()
	defer sb.c.mu.Unlock()
	if sb.c.gen != 1 {
		t.Errorf("generation %d; want 1 redial", sb.c.gen)
	}
}
