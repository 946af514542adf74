package berth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/setupscript"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
)

// fakeFS is a file system per fake sandbox for the commands setup sends:
// setupscript.WriteFile writes, "cat PATH" reads, setupscript.Clean and
// setupscript.Environ answer as a clean sandbox would (environ, if set,
// is what process 1 shows).
type fakeFS struct {
	mu      sync.Mutex
	files   map[string]map[string]string // sandbox -> path -> content
	cleaned int
	environ string
	// cleanGate, if not nil, holds every setupscript.Clean until it is
	// closed; each arrival is sent on cleanArrived first.
	cleanGate    chan struct{}
	cleanArrived chan struct{}
}

func (f *fakeFS) handlers() map[string]fake.HandlerFunc {
	f.files = map[string]map[string]string{}
	return map[string]fake.HandlerFunc{
		setupscript.WriteFile: func(_ context.Context, inv fake.Invocation) (int, error) {
			b, err := io.ReadAll(inv.Stdin)
			if err != nil {
				return 1, err
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.files[inv.SandboxID] == nil {
				f.files[inv.SandboxID] = map[string]string{}
			}
			f.files[inv.SandboxID][inv.Argv[4]] = string(b) + " mode=" + inv.Argv[5]
			return 0, nil
		},
		setupscript.Clean: func(context.Context, fake.Invocation) (int, error) {
			if f.cleanGate != nil {
				f.cleanArrived <- struct{}{}
				<-f.cleanGate
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.cleaned++
			return 0, nil
		},
		setupscript.Environ: func(_ context.Context, inv fake.Invocation) (int, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			fmt.Fprintf(inv.Stdout, "PATH=/bin\x00%s", f.environ)
			return 0, nil
		},
		"fail-step": func(_ context.Context, inv fake.Invocation) (int, error) {
			fmt.Fprint(inv.Stderr, "no such package")
			return 3, nil
		},
		// leak-step prints argv[1] (a secret value, as a hostile step
		// could) to stderr, padded by argv[2] bytes before and argv[3]
		// after, and fails.
		"leak-step": func(_ context.Context, inv fake.Invocation) (int, error) {
			var before, after int
			fmt.Sscan(inv.Argv[2], &before)
			fmt.Sscan(inv.Argv[3], &after)
			fmt.Fprint(inv.Stderr, strings.Repeat("x", before)+inv.Argv[1]+strings.Repeat("y", after))
			return 4, nil
		},
	}
}

func (f *fakeFS) file(sandbox, path string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[sandbox][path]
}

const fakeScript = `{"steps": [
	{"write": {"path": "/etc/motd", "mode": "0640", "content": "hello from setup"}},
	{"run": ["echo", "installed"]}
]}`

func newSetupWorld(t *testing.T, o *berth.Options, fo *fake.Options) (*tplWorld, *fakeFS) {
	t.Helper()
	fs := &fakeFS{}
	if fo == nil {
		fo = &fake.Options{}
	}
	fo.Handlers = fs.handlers()
	fk := fake.New(fo)
	opts := berth.Options{Drivers: []drivers.Driver{fk}, TestMode: true}
	if o != nil {
		opts = *o
		opts.Drivers, opts.TestMode = []drivers.Driver{fk}, true
	}
	w := newTplWorld(t, &opts, fk)
	cfg := map[string]any{"image": w.img, "region": "r1"}
	if fo.APIKey != "" {
		cfg["api_key"] = fo.APIKey
	}
	v, err := w.sys.Catalog().Create(context.Background(), tplOps, environment.CreateRequest{Name: "setup-fake", Driver: fk.Name(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	w.env = v
	return w, fs
}

func liveSandboxes(fk *fake.Driver) []string {
	var out []string
	for _, sb := range fakectl.Of(fk).Sandboxes() {
		if sb.State != drivers.StateDestroyed {
			out = append(out, sb.ID)
		}
	}
	return out
}

// Issue 30 on the fake driver: a scripted setup writes a file and runs a
// command in a sandbox leased under the instance company, removes berth's
// files, captures, destroys the sandbox with proof and promotes; its
// progress is stored and read after a cursor; the same script again is
// answered with the template, creating no sandbox.
func TestScriptedSetupOnFake(t *testing.T) {
	ctx := context.Background()
	w, fs := newSetupWorld(t, nil, nil)
	svc := w.sys.Templates()
	var seen []int64
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Name: "motd", Script: strings.NewReader(fakeScript),
		Promote: true, Progress: func(e *templates.SessionEvent) { seen = append(seen, e.Seq) }})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if ses.State != templates.SessionPromoted || ses.Template == "" || ses.Lease == "" || ses.LeaseCleanup != string("confirmed") || ses.Reused {
		t.Fatalf("session %+v", ses)
	}
	l, err := w.sys.Leases().Get(ctx, tplOps, ses.Lease)
	if err != nil || l.Company != authz.InstanceCompany || l.Run != ses.ID || l.Cleanup != "confirmed" {
		t.Fatalf("setup lease %+v, %v", l, err)
	}
	if got := fs.file(l.ProviderLeaseID, "/etc/motd"); got != "hello from setup mode=0640" {
		t.Errorf("file written in the setup sandbox: %q", got)
	}
	if fs.cleaned != 1 {
		t.Errorf("berth's files removed %d times before the capture, want 1", fs.cleaned)
	}
	if live := liveSandboxes(w.fk); len(live) != 0 {
		t.Errorf("sandboxes left: %v", live)
	}
	tpl, err := svc.Get(ctx, tplOps, ses.Template)
	if err != nil || tpl.State != templates.StateActive || tpl.ContentHash != ses.ContentHash || tpl.SetupSession != ses.ID {
		t.Fatalf("template %+v, %v", tpl, err)
	}
	all, err := svc.Events(ctx, tplOps, ses.ID, 0)
	if err != nil || len(all) < 5 {
		t.Fatalf("events %v, %v", all, err)
	}
	if len(seen) != len(all) || seen[0] != 1 || seen[len(seen)-1] != all[len(all)-1].Seq {
		t.Errorf("progress callbacks %v, stored events end at %d", seen, all[len(all)-1].Seq)
	}
	rest, err := svc.Events(ctx, tplBoard, ses.ID, 2)
	if err != nil || len(rest) != len(all)-2 || rest[0].Seq != 3 {
		t.Errorf("events after 2 read by a board member: %d, %v", len(rest), err)
	}
	if !strings.Contains(all[2].Message, "step 1/2: write /etc/motd") || all[len(all)-1].State != templates.SessionPromoted {
		t.Errorf("events: %q ... %q (%s)", all[2].Message, all[len(all)-1].Message, all[len(all)-1].State)
	}

	creates := fakectl.Of(w.fk).Calls("create")
	again, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Name: "motd", Script: strings.NewReader(fakeScript)})
	if err != nil {
		t.Fatalf("Setup again: %v", err)
	}
	if !again.Reused || again.Template != ses.Template || again.Lease != "" || again.State != templates.SessionPromoted {
		t.Errorf("the same script again: %+v", again)
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != creates {
		t.Errorf("the same script again created %d sandboxes", n-creates)
	}
	other, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(`{"steps": [{"run": ["true"]}]}`)})
	if err != nil || other.Reused || other.State != templates.SessionCaptured || other.BaseTemplate != ses.Template {
		t.Errorf("another script, started from the active template: %+v, %v", other, err)
	}

	// A template is not deleted while a setup session's sandbox uses it.
	open, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil || open.BaseTemplate != ses.Template {
		t.Fatalf("interactive setup from the template: %+v, %v", open, err)
	}
	rev, err := svc.Revoke(ctx, tplOps, ses.Template, templates.RevokeOptions{Delete: true})
	if err != nil || !rev.DeleteWanted || !strings.Contains(rev.DeleteNote, open.Lease) {
		t.Errorf("revoke with deletion during the session: %+v, %v", rev, err)
	}
	if _, err := svc.Cancel(ctx, tplOps, open.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.sys.Sweep(ctx, tplOps); err != nil {
		t.Fatal(err)
	}
	if rev, err = svc.Get(ctx, tplOps, ses.Template); err != nil || rev.State != templates.StateDeleted {
		t.Errorf("after the session and a sweep: %+v, %v", rev, err)
	}
}

// Refusals: unknown keys name the step; a failed step fails the session
// and destroys its sandbox; a second active session is refused; agents
// see nothing, board members read and do nothing; a driver without
// template_capture or terminal is refused before the script is read
// (IMG-7); a secret value in the image environment is not captured.
func TestSetupRefusalsOnFake(t *testing.T) {
	ctx := context.Background()
	w, fs := newSetupWorld(t, nil, &fake.Options{APIKey: "fake-key-5c1e"})
	svc := w.sys.Templates()
	_, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(`{"steps": [{"run": ["true"]}, {"run": ["x"], "sudo": true}]}`)})
	if !errors.Is(err, errcode.ErrInvalid) || !strings.Contains(err.Error(), "step 2") || !strings.Contains(err.Error(), "sudo") {
		t.Errorf("unknown key: %v", err)
	}
	_, err = svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(`{"steps": [{"write": {"path": "/x", "mode": "rw", "content": ""}}]}`)})
	if !errors.Is(err, errcode.ErrInvalid) || !strings.Contains(err.Error(), "step 1") {
		t.Errorf("bad mode: %v", err)
	}
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(`{"steps": [{"run": ["fail-step"]}]}`)})
	if errcode.ReasonOf(err) != "step_failed" || ses == nil || ses.State != templates.SessionFailed || !strings.Contains(ses.FailureReason, "step 1: exited 3: no such package") {
		t.Errorf("failed step: %+v, %v", ses, err)
	}
	if live := liveSandboxes(w.fk); len(live) != 0 {
		t.Errorf("sandboxes left after a failed step: %v", live)
	}

	_, err = svc.Setup(ctx, tplAgent, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("an agent's setup: %v", err)
	}
	_, err = svc.Setup(ctx, tplBoard, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("a board member's setup: %v", err)
	}
	open, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil || open.State != templates.SessionWaiting {
		t.Fatalf("interactive setup: %+v, %v", open, err)
	}
	br, err := w.sys.Catalog().BlastRadius(ctx, tplOps, w.env.ID)
	if err != nil || len(br.SetupSessions) != 1 || br.SetupSessions[0].ID != open.ID || !hasRef(br.ActiveLeases, open.Lease) {
		t.Errorf("blast radius during a session: %+v, %v", br, err)
	}
	if _, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true}); !errors.Is(err, templates.ErrSessionActive) {
		t.Errorf("a second active session: %v", err)
	}
	if got, err := svc.Session(ctx, tplBoard, open.ID); err != nil || got.ID != open.ID || got.Base != "" {
		t.Errorf("a board member reads the session: %+v, %v", got, err)
	}
	if _, err := svc.Session(ctx, tplAgent, open.ID); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("an agent reads the session: %v", err)
	}
	if _, err := svc.Cancel(ctx, tplBoard, open.ID); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("a board member cancels: %v", err)
	}
	if _, err := svc.OpenTerminal(ctx, tplAgent, open.ID, 24, 80); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("an agent opens the terminal: %v", err)
	}
	fs.environ = "LEAKED=fake-key-5c1e\x00"
	got, err := svc.CaptureSession(ctx, tplOps, open.ID, false)
	if err == nil || strings.Contains(err.Error(), "fake-key-5c1e") || got.State != templates.SessionFailed || got.Template != "" {
		t.Errorf("capture with a secret in the image environment: %+v, %v", got, err)
	}
	if live := liveSandboxes(w.fk); len(live) != 0 {
		t.Errorf("sandboxes left after the refused capture: %v", live)
	}
	if list, _ := svc.List(ctx, tplOps, w.env.ID); len(list) != 0 {
		t.Errorf("templates made: %d", len(list))
	}

	// IMG-7: a driver without template_capture, and one without terminal.
	for _, tc := range []struct {
		undeclared  drivers.Capability
		interactive bool
	}{{drivers.CapTemplateCapture, false}, {drivers.CapTerminal, true}} {
		nw, _ := newSetupWorld(t, nil, &fake.Options{Undeclared: drivers.NewSet(tc.undeclared)})
		read := &countingReader{r: strings.NewReader(fakeScript)}
		_, err := nw.sys.Templates().Setup(ctx, tplOps, templates.SetupRequest{Environment: nw.env.ID, Script: read, Interactive: tc.interactive})
		if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), tc.undeclared.String()) || !strings.Contains(err.Error(), nw.fk.Name()) {
			t.Errorf("without %s: %v", tc.undeclared, err)
		}
		if read.n != 0 || fakectl.Of(nw.fk).Calls("create") != 0 {
			t.Errorf("without %s: %d script bytes read, %d sandboxes created", tc.undeclared, read.n, fakectl.Of(nw.fk).Calls("create"))
		}
		if tc.undeclared == drivers.CapTerminal {
			ses, err := nw.sys.Templates().Setup(ctx, tplOps, templates.SetupRequest{Environment: nw.env.ID, Script: strings.NewReader(fakeScript)})
			if err != nil || ses.State != templates.SessionCaptured {
				t.Errorf("scripted setup without a terminal: %+v, %v", ses, err)
			}
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// Sweep: a session idle past its TTL is timed out and its sandbox
// destroyed, also when the process running it is gone (a second System
// on the same stores sweeps); a lease of a session whose record never
// learnt it is destroyed too.
func TestSetupSweepOnFake(t *testing.T) {
	ctx := context.Background()
	w, _ := newSetupWorld(t, &berth.Options{Templates: &templates.Options{SessionTTL: time.Millisecond, SessionMaxTTL: time.Hour}}, nil)
	svc := w.sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	rep, err := w.sys.Sweep(ctx, tplOps)
	if err != nil {
		t.Fatal(err)
	}
	got, err := svc.Session(ctx, tplOps, ses.ID)
	if err != nil || got.State != templates.SessionTimedOut || got.LeaseCleanup != string("confirmed") || rep.Sessions.TimedOut != 1 {
		t.Errorf("after the sweep: %+v, %v (report %+v)", got, err, rep.Sessions)
	}
	if live := liveSandboxes(w.fk); len(live) != 0 {
		t.Errorf("sandboxes left: %v", live)
	}
	if _, err := w.sys.Sweep(ctx, tplAgent); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("an agent's sweep: %v", err)
	}
	// A setup lease whose session ended without destroying it (a crash
	// between the two writes).
	h, err := w.sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{EnvironmentID: w.env.ID, Company: authz.InstanceCompany, Run: ses.ID,
		Metadata: map[string]string{"berth.setup-session": ses.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err = w.sys.Sweep(ctx, tplOps); err != nil || rep.Sessions.SandboxesDestroyed != 1 {
		t.Errorf("sweep of a stray setup lease: %+v, %v", rep.Sessions, err)
	}
	if l, err := w.sys.Leases().Get(ctx, tplOps, h.ID()); err != nil || l.Cleanup != "confirmed" {
		t.Errorf("stray setup lease after the sweep: %+v, %v", l, err)
	}
}

// The web terminal's ring on the fake driver: a reconnect asking for bytes
// that left the bounded ring gets "reset" and exactly the ring's tail,
// never the whole history; a reconnect within the ring gets "attached"
// and the missing bytes.
func TestWebTerminalRingResetOnFake(t *testing.T) {
	ctx := context.Background()
	w, _ := newSetupWorld(t, nil, nil)
	svc := w.sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	const ring = 64
	h := svc.TerminalHandler(func(*http.Request) (authz.Principal, error) { return tplOps, nil })
	templatehook.SetTerminalRing(h, ring)
	srv := httptest.NewServer(h)
	defer srv.Close()
	mint := func() string {
		m, _, err := svc.MintTerminalToken(ctx, tplOps, ses.ID, "/")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tc, _, err := termDial(t, srv.URL, "/", "ops", url.Values{"token": {mint()}})
	if err != nil {
		t.Fatal(err)
	}
	proc := tc.first["process"].(string)
	tc.send("echo " + strings.Repeat("x", 100) + "-first\n")
	tc.until("-first\r\n$ ")
	tc.send("echo second\n")
	tc.until("second\r\n$ ")
	seen := tc.out.String()
	tc.c.CloseNow()

	again, _, err := termDial(t, srv.URL, "/", "ops", url.Values{"token": {mint()}, "process": {proc}, "offset": {"0"}})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := again.first["offset"].(float64)
	if again.first["type"] != "reset" || first < ring {
		t.Fatalf("offset 0 after more than %d bytes: %v, want reset at the ring's start", ring, again.first)
	}
	again.until("second\r\n$ ")
	if got := again.out.String(); got != seen[len(seen)-ring:] {
		t.Errorf("after the reset: %q, want exactly the ring's tail %q", got, seen[len(seen)-ring:])
	}
	again.c.CloseNow()
	total := int64(first) + ring
	within, _, err := termDial(t, srv.URL, "/", "ops", url.Values{"token": {mint()}, "process": {proc}, "offset": {fmt.Sprint(total - 10)}})
	if err != nil {
		t.Fatal(err)
	}
	if within.first["type"] != "attached" || within.first["offset"] != float64(total-10) {
		t.Fatalf("offset within the ring: %v", within.first)
	}
	within.until("$ ")
	if got := within.out.String(); got != seen[len(seen)-10:] {
		t.Errorf("within the ring: %q, want %q", got, seen[len(seen)-10:])
	}
	within.send("exit 3\n")
	readCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for within.read(readCtx) {
	}
	if n := len(within.control); n == 0 || within.control[n-1]["type"] != "exit" || within.control[n-1]["code"] != float64(3) {
		t.Errorf("control frames after exit 3: %v, want an exit frame with code 3", within.control)
	}
	within.c.CloseNow()
	if _, err := svc.Cancel(ctx, tplOps, ses.ID); err != nil {
		t.Fatal(err)
	}
}

func hasRef(refs []environment.Reference, id string) bool {
	for _, r := range refs {
		if r.ID == id {
			return true
		}
	}
	return false
}

// Seeded crash schedules over setup sessions on the fake driver: for each
// seed, three environments each get a session left as a process killed at
// a random point leaves it (before the sandbox create, after it and before
// the session learnt its lease, mid-capture with the template made but not
// recorded, mid-promote after the capture), some destroys fail once; two
// sweeps later every setup sandbox is destroyed with proof, every session
// has ended, and no template is active unless its environment's pointer
// names it (none half-made).
func TestSetupCrashSchedulesOnFake(t *testing.T) {
	ctx := context.Background()
	points := []string{"before-create", "after-create", "mid-capture", "mid-promote", "mid-promote-swapped"}
	for seed := int64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 30))
		st := store.Memory()
		w, _ := newSetupWorld(t, &berth.Options{Stores: st}, nil)
		svc := w.sys.Templates()
		var schedule []string
		for e := range 3 {
			env := w.env
			if e > 0 {
				v, err := w.sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: fmt.Sprintf("crash-%d", e), Driver: w.fk.Name(),
					Config: map[string]any{"image": w.img, "region": "r1"}})
				if err != nil {
					t.Fatal(err)
				}
				env = v
			}
			point := points[(int(seed)+e*rng.IntN(len(points)))%len(points)] // the first environment cycles through every point
			schedule = append(schedule, point)
			past := time.Now().Add(-time.Minute).UTC()
			ses := &templates.Session{ID: fmt.Sprintf("ses_crash_%d_%d", seed, e), Environment: env.ID, Driver: w.fk.Name(), State: templates.SessionStarting,
				CreatedAt: past.Add(-time.Minute), UpdatedAt: past, ExpiresAt: past, Deadline: past.Add(time.Hour), Version: 1}
			if err := tplRecords(st.Templates).InsertSession(ctx, ses); err != nil {
				t.Fatal(err)
			}
			if point == "before-create" {
				continue
			}
			h, err := w.sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{EnvironmentID: env.ID, Company: authz.InstanceCompany, Run: ses.ID,
				Metadata: map[string]string{"berth.setup-session": ses.ID}})
			if err != nil {
				t.Fatal(err)
			}
			if point == "after-create" {
				continue
			}
			next := *ses
			next.State, next.Lease, next.Version = templates.SessionCapturing, h.ID(), 2
			if err := tplRecords(st.Templates).UpdateSession(ctx, &next); err != nil {
				t.Fatal(err)
			}
			tpl, err := svc.Capture(ctx, tplOps, h.ID(), "half")
			if err != nil {
				t.Fatal(err)
			}
			if point == "mid-capture" {
				continue
			}
			// mid-promote: the capture was recorded and the sandbox
			// destroyed; the process died before the pointer moved.
			if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
				t.Fatal(err)
			}
			next.State, next.Template, next.Version = templates.SessionCaptured, tpl.ID, 3
			if err := tplRecords(st.Templates).UpdateSession(ctx, &next); err != nil {
				t.Fatal(err)
			}
			if point == "mid-promote-swapped" { // the pointer moved, the template states did not
				cur, err := st.Environments.GetEnvironment(ctx, env.ID)
				if err != nil {
					t.Fatal(err)
				}
				moved := *cur
				moved.ActiveTemplate = &environment.ActiveTemplate{ID: tpl.ID, Identity: tpl.Identity, SourceFingerprint: tpl.SourceFingerprint}
				moved.Revision = cur.Revision + 1
				if err := st.Environments.UpdateEnvironment(ctx, &moved, cur.Revision); err != nil {
					t.Fatal(err)
				}
			}
		}
		live, destroysBefore := len(liveSandboxes(w.fk)), fakectl.Of(w.fk).Calls("destroy")
		injected := live > 0 && rng.IntN(2) == 0
		if injected { // the first destroy of the sweep fails once, not as a transient error
			fakectl.Of(w.fk).FailNth("destroy", destroysBefore+1, errors.New("fake: provider refused the delete"))
		}
		for range 2 {
			if _, err := w.sys.Sweep(ctx, tplOps); err != nil {
				t.Fatalf("seed %d %v: sweep: %v", seed, schedule, err)
			}
		}
		if left := liveSandboxes(w.fk); len(left) != 0 {
			t.Errorf("seed %d %v: sandboxes left: %v", seed, schedule, left)
		}
		if n := fakectl.Of(w.fk).Calls("destroy") - destroysBefore; injected && n < live+1 || n < live {
			t.Errorf("seed %d %v: %d destroy calls for %d sandboxes (a failure injected: %t)", seed, schedule, n, live, injected)
		}
		ls, err := st.Leases.ListLeases(ctx, lease.Filter{Company: authz.InstanceCompany})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Cleanup != "confirmed" {
				t.Errorf("seed %d %v: setup lease %s is %s, cleanup %q", seed, schedule, l.ID, l.Status, l.Cleanup)
			}
		}
		sessions, err := tplRecords(st.Templates).ListSessions(ctx, templatehook.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sessions {
			if s.State.Active() {
				t.Errorf("seed %d %v: session %s still %s", seed, schedule, s.ID, s.State)
			}
		}
		tpls, err := tplRecords(st.Templates).ListTemplates(ctx, templatehook.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tpl := range tpls {
			env, err := st.Environments.GetEnvironment(ctx, tpl.Environment)
			if err != nil {
				t.Fatal(err)
			}
			named := env.ActiveTemplate != nil && env.ActiveTemplate.ID == tpl.ID
			if (tpl.State == templates.StateActive) != named || tpl.State == templates.StateActive && tpl.Identity == "" {
				t.Errorf("seed %d %v: template %s is %s, pointer names it: %t", seed, schedule, tpl.ID, tpl.State, named)
			}
		}
	}
}

// barrierSessions makes two InsertSession calls meet before either runs.
type barrierSessions struct {
	tplStore
	gate *sync.WaitGroup
}

func (b barrierSessions) InsertSession(ctx context.Context, s *templates.Session) error {
	b.gate.Done()
	b.gate.Wait()
	return b.tplStore.InsertSession(ctx, s)
}

// IMG-4, issue 30: two setup sessions of one environment started at once
// by two Systems (two lease managers) over one PostgreSQL: exactly one
// exists, the other is refused with ErrSessionActive and allocated
// nothing.
func TestTwoSetupsAtOnceOverOnePostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	fs := &fakeFS{}
	fk := fake.New(&fake.Options{Handlers: fs.handlers()})
	gate := &sync.WaitGroup{}
	stA, stB := openStores(t, url), openStores(t, url)
	a := newTplWorld(t, &berth.Options{Stores: stA, Drivers: []drivers.Driver{fk}, TestMode: true, MemorySecrets: true}, fk)
	a.create(t, "setup-race")
	stA.Templates = sealTpl(barrierSessions{tplRecords(stA.Templates), gate})
	stB.Templates = sealTpl(barrierSessions{tplRecords(stB.Templates), gate})
	var systems []*berth.System
	for _, st := range []store.Stores{stA, stB} {
		sys, err := berth.New(ctx, &berth.Options{Stores: st, Drivers: []drivers.Driver{fk}, TestMode: true, MemorySecrets: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Close()
		systems = append(systems, sys)
	}
	gate.Add(2)
	var wg sync.WaitGroup
	got := make([]*templates.Session, 2)
	errs := make([]error, 2)
	for i, sys := range systems {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = sys.Templates().Setup(ctx, tplOps, templates.SetupRequest{Environment: a.env.ID, Interactive: true})
		}()
	}
	wg.Wait()
	won := 0
	for i := range 2 {
		switch {
		case errs[i] == nil && got[i].State == templates.SessionWaiting:
			won++
		case errors.Is(errs[i], templates.ErrSessionActive):
		default:
			t.Errorf("setup %d: %+v, %v", i, got[i], errs[i])
		}
	}
	list, err := systems[0].Templates().Sessions(ctx, tplOps, a.env.ID)
	if err != nil {
		t.Fatal(err)
	}
	if won != 1 || len(list) != 1 || fakectl.Of(fk).Calls("create") != 1 {
		t.Errorf("%d started, %d stored, %d sandboxes created; want 1, 1 and 1", won, len(list), fakectl.Of(fk).Calls("create"))
	}
	if len(list) == 1 {
		if _, err := systems[1].Templates().Cancel(ctx, tplOps, list[0].ID); err != nil {
			t.Errorf("cancel from the other replica: %v", err)
		}
	}
	if live := liveSandboxes(fk); len(live) != 0 {
		t.Errorf("sandboxes left: %v", live)
	}
}

// Issue 49 (a found bug): the setup session records the template its
// sandbox started from (Session.BaseTemplate) from the stored lease
// record, never from the handle's view, which for a principal who may not
// read configs is redacted (no labels). A host's Authorizer that lets a
// setup operator run setups but not read configs: the session of that
// operator's setup from the active template names the template, as an
// admin's does. Fake driver.
func TestSetupByAnOperatorWhoMayNotReadConfigsOnFake(t *testing.T) {
	ctx := context.Background()
	setupOp := authz.Principal{ID: "setup-op", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	az := authz.AuthorizerFunc(func(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
		if p.ID == setupOp.ID && a != authz.ActionReadConfig {
			return nil
		}
		return authz.DefaultPolicy{}.Authorize(ctx, p, a, r)
	})
	w, _ := newSetupWorld(t, &berth.Options{Authorizer: az}, nil)
	svc := w.sys.Templates()
	first, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Name: "motd", Script: strings.NewReader(fakeScript), Promote: true})
	if err != nil || first.State != templates.SessionPromoted {
		t.Fatalf("the admin's first setup: %+v, %v", first, err)
	}
	ses, err := svc.Setup(ctx, setupOp, templates.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(`{"steps": [{"run": ["true"]}]}`)})
	if err != nil {
		t.Fatalf("the setup operator's setup: %v", err)
	}
	if ses.State != templates.SessionCaptured || ses.BaseTemplate != first.Template {
		t.Errorf("the setup operator's session from the active template %s: state %s, base template %q", first.Template, ses.State, ses.BaseTemplate)
	}
	if l, err := w.sys.Leases().Get(ctx, setupOp, ses.Lease); err != nil || !l.Redacted {
		t.Errorf("the setup operator reads the lease %+v, %v; want the redacted view (the case of the bug)", l, err)
	}
}

// tplStore is the store inside a templates.Store (sealed).
type tplStore = templatehook.Records[*templates.Template, *templates.Session, *templates.Event, *templates.SessionEvent]

// tplRecords returns the records inside the sealed templates store s.
func tplRecords(s templates.Store) tplStore { return templatehook.Unseal(s).(tplStore) }

// sealTpl returns r as a templates.Store, for a test's wrapper of berth's store.
func sealTpl(r tplStore) templates.Store { return templatehook.Seal(r).(templates.Store) }
