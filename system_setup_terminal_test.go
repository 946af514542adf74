package berth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
)

// termClient is a web terminal connection: binary frames are output,
// text frames control.
type termClient struct {
	t       *testing.T
	c       *websocket.Conn
	out     bytes.Buffer
	first   map[string]any // the first control frame
	control []map[string]any
}

var termPrincipals = map[string]authz.Principal{
	"ops":   tplOps,
	"admin": {ID: "admin-2", Role: authz.RoleInstanceAdmin},
}

func termDial(t *testing.T, base, path, as string, q url.Values) (*termClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+path+"?"+q.Encode(),
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Test-As": {as}}})
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(1 << 22)
	tc := &termClient{t: t, c: c}
	mt, data, err := c.Read(ctx)
	if err != nil || mt != websocket.MessageText {
		t.Fatalf("first frame: %v %q, %v", mt, data, err)
	}
	if err := json.Unmarshal(data, &tc.first); err != nil {
		t.Fatal(err)
	}
	return tc, resp, nil
}

// until reads until the output holds want (or fails after 60 s).
func (tc *termClient) until(want string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for !strings.Contains(tc.out.String(), want) {
		if !tc.read(ctx) {
			tc.t.Fatalf("connection ended before %q; output tail %q", want, tail(tc.out.String()))
		}
	}
}

func (tc *termClient) read(ctx context.Context) bool {
	mt, data, err := tc.c.Read(ctx)
	if err != nil {
		return false
	}
	if mt == websocket.MessageBinary {
		tc.out.Write(data)
		return true
	}
	var f map[string]any
	_ = json.Unmarshal(data, &f)
	tc.control = append(tc.control, f)
	return true
}

func (tc *termClient) send(s string) {
	tc.t.Helper()
	if err := tc.c.Write(context.Background(), websocket.MessageBinary, []byte(s)); err != nil {
		tc.t.Fatal(err)
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

// Issue 30's terminal (IMG-5) on the real Docker engine, through the
// WebSocket handler: type a command and read its output; resize and see
// it in stty size; cut the connection while seq 1 200000 prints and
// resume at the offset: the bytes received equal the command's output,
// none lost or repeated; a reused token, an expired one, one for another
// session or path and one minted for another principal are refused before
// the upgrade; a process unknown here gets a fresh shell and "reset"; what
// was typed is captured.
func TestWebTerminalOnDocker(t *testing.T) {
	ctx := context.Background()
	cli, img, run := dockerRig(t)
	testenv.RemoveImagesAtCleanup(t, cli, "test.berth/run", run)
	st := store.Memory()
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, Stores: st})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	mkEnv := func(name string) *environment.View {
		v, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: name, Driver: "docker", Config: map[string]any{
			"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	env, other := mkEnv("term-docker"), mkEnv("term-other")
	svc := sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: env.ID, Name: "typed", Interactive: true})
	if err != nil || ses.State != templates.SessionWaiting {
		t.Fatalf("interactive setup: %+v, %v", ses, err)
	}
	ses2, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: other.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = svc.Cancel(ctx, tplOps, ses2.ID) }()
	h := svc.TerminalHandler(func(r *http.Request) (authz.Principal, error) {
		p, ok := termPrincipals[r.Header.Get("X-Test-As")]
		if !ok {
			return authz.Principal{}, errors.New("unknown")
		}
		return p, nil
	})
	templatehook.SetTerminalRing(h, 4<<20)
	mux := http.NewServeMux()
	mux.Handle("/term", h)
	mux.Handle("/other", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	mint := func(id, path string) string {
		t.Helper()
		m, _, err := svc.MintTerminalToken(ctx, tplOps, id, path)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	tok := mint(ses.ID, "/term")
	tc, _, err := termDial(t, srv.URL, "/term", "ops", url.Values{"token": {tok}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	proc, _ := tc.first["process"].(string)
	if tc.first["type"] != "attached" || proc == "" {
		t.Fatalf("first frame %v", tc.first)
	}
	tc.send("echo hel''lo-term; echo typed-in-terminal > /typed-file\n")
	tc.until("hello-term")
	if err := tc.c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","rows":41,"cols":101}`)); err != nil {
		t.Fatal(err)
	}
	tc.send("stty size\n")
	tc.until("41 101")

	start := tc.out.Len()
	tc.send("seq 1 200000; echo END''MARK\n")
	readCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	for tc.out.Len() < start+200_000 {
		if !tc.read(readCtx) {
			t.Fatal("connection ended during seq")
		}
	}
	cancel()
	tc.c.CloseNow()
	offset := tc.out.Len()
	if strings.Contains(tc.out.String()[start:], "ENDMARK") {
		t.Fatalf("seq finished before the cut (%d bytes): the cut tests nothing", offset-start)
	}

	// Refused before the upgrade: reused, expired, another session,
	// another path, another principal.
	// Its hash as the service stores it: the token, principal and path.
	expired := "bt_expired-token-for-the-test"
	sum := sha256.Sum256([]byte("berth-terminal-token-v2\x00" + expired + "\x00" + tplOps.ID + "\x00" + string(tplOps.Role) + "\x00/term"))
	if err := tplRecords(st.Templates).InsertTerminalToken(ctx, &templatehook.TerminalToken{Hash: hex.EncodeToString(sum[:]), Session: ses.ID,
		ExpiresAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, as string
		q              url.Values
		status         int
	}{
		{"a reused token", "/term", "ops", url.Values{"token": {tok}}, http.StatusUnauthorized},
		{"an expired token", "/term", "ops", url.Values{"token": {expired}}, http.StatusUnauthorized},
		{"a token of another session", "/term", "ops", url.Values{"token": {mint(ses2.ID, "/term")}, "session": {ses.ID}}, http.StatusForbidden},
		{"a token for another path", "/term", "ops", url.Values{"token": {mint(ses.ID, "/other")}}, http.StatusUnauthorized},
		{"a token minted for another principal", "/term", "admin", url.Values{"token": {mint(ses.ID, "/term")}}, http.StatusUnauthorized},
		{"no token", "/term", "ops", url.Values{}, http.StatusUnauthorized},
	} {
		_, resp, err := termDial(t, srv.URL, tc.path, tc.as, tc.q)
		if err == nil || resp == nil || resp.StatusCode != tc.status {
			t.Errorf("%s: %v, response %v; want status %d before any upgrade", tc.name, err, resp, tc.status)
		}
	}

	tc2, _, err := termDial(t, srv.URL, "/term", "ops", url.Values{"token": {mint(ses.ID, "/term")}, "process": {proc}, "offset": {fmt.Sprint(offset)}})
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	if tc2.first["type"] != "attached" || tc2.first["process"] != proc || tc2.first["offset"] != float64(offset) {
		t.Fatalf("reconnect's first frame %v, want attached at %d", tc2.first, offset)
	}
	tc2.until("ENDMARK")
	all := tc.out.String() + tc2.out.String()
	got := all[start:strings.LastIndex(all, "ENDMARK")]
	got = strings.ReplaceAll(got, "\r\n", "\n")
	got = got[strings.LastIndex(got, "END''MARK\n")+len("END''MARK\n"):] // after the echoed command line
	var want strings.Builder
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got != want.String() {
		t.Errorf("seq output across the cut: %d bytes, want %d (head %q, tail %q)", len(got), want.Len(), got[:min(len(got), 40)], tail(got))
	}
	tc2.c.CloseNow()

	fresh, _, err := termDial(t, srv.URL, "/term", "ops", url.Values{"token": {mint(ses.ID, "/term")}, "process": {"prc_from_another_replica"}, "offset": {"9"}})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.first["type"] != "reset" || fresh.first["process"] == proc || fresh.first["offset"] != nil {
		t.Errorf("unknown process: first frame %v, want reset of a fresh shell at 0", fresh.first)
	}
	fresh.c.CloseNow()

	done, err := svc.CaptureSession(ctx, tplOps, ses.ID, true)
	if err != nil || done.State != templates.SessionPromoted {
		t.Fatalf("capture: %+v, %v", done, err)
	}
	lh, err := sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = lh.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}) }()
	res, err := lh.Exec(ctx, lease.Command{Argv: []string{"cat", "/typed-file"}})
	if err != nil || string(res.Stdout) != "typed-in-terminal\n" {
		t.Errorf("a new lease reads %q, %v", res.Stdout, err)
	}
}
