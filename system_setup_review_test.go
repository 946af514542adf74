package berth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
)

// A failed step's stderr is redacted of the environment's secret values
// before it is cut to its tail: a secret straddling the cut, or the
// output limit, leaves no part of it in the stored reason, the events or
// the error.
func TestSetupStepStderrRedactedBeforeTail(t *testing.T) {
	ctx := context.Background()
	const secret = "fake-key-5c1e-0a9b7d"
	w, _ := newSetupWorld(t, nil, &fake.Options{APIKey: secret})
	svc := w.sys.Templates()
	for _, tc := range []struct {
		name, before, after string
	}{
		{"the tail cuts into the secret", "0", "500"},           // the last 512 bytes hold all of it but its first 8 bytes
		{"the output limit cuts into the secret", "65530", "0"}, // 64 KiB kept: its first 6 bytes are the end
	} {
		script := `{"steps": [{"run": ["leak-step", "` + secret + `", "` + tc.before + `", "` + tc.after + `"]}]}`
		ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(script)})
		if errcode.ReasonOf(err) != "step_failed" || ses == nil || ses.State != templates.SessionFailed {
			t.Fatalf("%s: %+v, %v", tc.name, ses, err)
		}
		texts := []string{err.Error(), ses.FailureReason}
		evs, eerr := svc.Events(ctx, tplOps, ses.ID, 0)
		if eerr != nil {
			t.Fatal(eerr)
		}
		for _, e := range evs {
			texts = append(texts, e.Message)
		}
		for _, s := range texts {
			if strings.Contains(s, "x"+secret[:6]) || strings.Contains(s, secret[8:]+"y") || strings.Contains(s, secret[8:]) {
				t.Errorf("%s: part of the secret is in %q", tc.name, s[max(0, len(s)-80):])
			}
		}
		if !strings.Contains(ses.FailureReason, "exited 4") {
			t.Errorf("%s: reason %q does not say the exit code", tc.name, ses.FailureReason)
		}
	}
}

// cancelOnInsert cancels a setup session (through sys) when a capture
// records its template: a Cancel that lands while the capture runs.
type cancelOnInsert struct {
	tplStore
	cancel func()
}

func (c cancelOnInsert) InsertTemplate(ctx context.Context, t *templates.Template) error {
	if t.SetupSession != "" && c.cancel != nil {
		c.cancel()
	}
	return c.tplStore.InsertTemplate(ctx, t)
}

// A Cancel that lands while the session captures ends the session and
// destroys its sandbox; the template the capture still made is not left
// promotable (revoked, and deleted at the provider), so a cancelled
// session leaves no template behind.
func TestSetupCancelDuringCaptureLeavesNoTemplate(t *testing.T) {
	ctx := context.Background()
	st := store.Memory()
	var sys *berth.System
	var sid string
	var cancelErr error
	wrapped := &cancelOnInsert{tplStore: tplRecords(st.Templates)}
	st.Templates = sealTpl(wrapped)
	w, _ := newSetupWorld(t, &berth.Options{Stores: st}, nil)
	sys = w.sys
	svc := sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil || ses.State != templates.SessionWaiting {
		t.Fatalf("interactive setup: %+v, %v", ses, err)
	}
	sid = ses.ID
	wrapped.cancel = func() {
		wrapped.cancel = nil
		_, cancelErr = svc.Cancel(ctx, tplOps, sid)
	}
	got, err := svc.CaptureSession(ctx, tplOps, sid, false)
	if cancelErr != nil {
		t.Fatalf("cancel during the capture: %v", cancelErr)
	}
	if err == nil || !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("capture of a session cancelled meanwhile: %+v, %v", got, err)
	}
	if cur, err := svc.Session(ctx, tplOps, sid); err != nil || cur.State != templates.SessionCancelled {
		t.Errorf("session after the cancel: %+v, %v", cur, err)
	}
	if live := liveSandboxes(w.fk); len(live) != 0 {
		t.Errorf("sandboxes left: %v", live)
	}
	list, err := svc.List(ctx, tplOps, w.env.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range list {
		if tpl.State == templates.StateCaptured || tpl.State == templates.StateActive || tpl.State == templates.StateSuperseded {
			t.Errorf("template %s of the cancelled session is %s (promotable)", tpl.ID, tpl.State)
		}
		if tpl.State != templates.StateDeleted {
			t.Errorf("template %s of the cancelled session is %s, not deleted at the provider", tpl.ID, tpl.State)
		}
		if _, err := svc.Promote(ctx, tplOps, tpl.ID); err == nil {
			t.Errorf("template %s of the cancelled session was promoted", tpl.ID)
		}
	}
}

// A provider error that echoes a secret value (as some APIs echo the
// credential they refused) does not carry it into the error Setup
// returns, the stored reason or the events.
func TestSetupProviderErrorRedacted(t *testing.T) {
	ctx := context.Background()
	const secret = "fake-key-77aa-echoed"
	w, _ := newSetupWorld(t, nil, &fake.Options{APIKey: secret})
	fakectl.Of(w.fk).Inject(fakectl.Fault{Op: "create", Err: errors.New("provider refused the request signed with " + secret)})
	ses, err := w.sys.Templates().Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(`{"steps": [{"run": ["true"]}]}`)})
	if err == nil || ses == nil || ses.State != templates.SessionFailed {
		t.Fatalf("setup with a failing create: %+v, %v", ses, err)
	}
	texts := []string{err.Error(), ses.FailureReason}
	evs, _ := w.sys.Templates().Events(ctx, tplOps, ses.ID, 0)
	for _, e := range evs {
		texts = append(texts, e.Message)
	}
	for _, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("the secret is in %q", s)
		}
	}
}

// A PTY of the web terminal is bound to the principal that opened it: a
// second operator, with a token of their own for the same session, who
// names the first one's process (a leaked id) gets a fresh shell and
// "reset", never the first one's output or input.
func TestWebTerminalProcessBoundToPrincipal(t *testing.T) {
	ctx := context.Background()
	w, _ := newSetupWorld(t, nil, nil)
	svc := w.sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	other := authz.Principal{ID: "ops-2", Role: authz.RoleInstanceAdmin}
	who := map[string]authz.Principal{"ops": tplOps, "ops-2": other}
	srv := httptest.NewServer(svc.TerminalHandler(func(r *http.Request) (authz.Principal, error) { return who[r.Header.Get("X-Test-As")], nil }))
	defer srv.Close()
	mint := func(p authz.Principal) string {
		m, _, err := svc.MintTerminalToken(ctx, p, ses.ID, "/")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first, _, err := termDial(t, srv.URL, "/", "ops", url.Values{"token": {mint(tplOps)}})
	if err != nil {
		t.Fatal(err)
	}
	proc := first.first["process"].(string)
	first.send("echo private-to-ops\n")
	first.until("private-to-ops\r\n$ ")
	first.c.CloseNow()

	stolen, _, err := termDial(t, srv.URL, "/", "ops-2", url.Values{"token": {mint(other)}, "process": {proc}, "offset": {"0"}})
	if err != nil {
		t.Fatal(err)
	}
	if stolen.first["type"] != "reset" || stolen.first["process"] == proc {
		t.Errorf("another principal naming process %s: %v, want reset and a fresh shell", proc, stolen.first)
	}
	stolen.send("echo fresh\n")
	stolen.until("fresh\r\n$ ")
	if strings.Contains(stolen.out.String(), "private-to-ops") {
		t.Errorf("another principal saw the first one's output: %q", stolen.out.String())
	}
	stolen.c.CloseNow()
	if _, err := svc.Cancel(ctx, tplOps, ses.ID); err != nil {
		t.Fatal(err)
	}
}

// holdCapturing holds the first move of a session to capturing until
// release is closed, after telling arrived.
type holdCapturing struct {
	tplStore
	once             *sync.Once
	arrived, release chan struct{}
}

func (h holdCapturing) UpdateSession(ctx context.Context, s *templates.Session) error {
	if s.State == templates.SessionCapturing {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.arrived)
			<-h.release
		}
	}
	return h.tplStore.UpdateSession(ctx, s)
}

// Two captures of one session at once (a double submit, two operators):
// the one that finds the session capturing already is refused with
// ErrConflict and touches nothing; the other captures, and the session
// ends captured with one template and no sandbox left.
func TestTwoCapturesOfOneSession(t *testing.T) {
	ctx := context.Background()
	st := store.Memory()
	hold := holdCapturing{tplStore: tplRecords(st.Templates), once: &sync.Once{}, arrived: make(chan struct{}), release: make(chan struct{})}
	st.Templates = sealTpl(hold)
	w, fs := newSetupWorld(t, &berth.Options{Stores: st}, nil)
	svc := w.sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	fs.cleanGate, fs.cleanArrived = make(chan struct{}), make(chan struct{}, 4)
	type result struct {
		ses *templates.Session
		err error
	}
	late, early := make(chan result, 1), make(chan result, 1)
	go func() { // read the session waiting, then held before its move
		s, err := svc.CaptureSession(ctx, tplOps, ses.ID, false)
		late <- result{s, err}
	}()
	<-hold.arrived
	go func() { // moves the session to capturing and cleans
		s, err := svc.CaptureSession(ctx, tplOps, ses.ID, false)
		early <- result{s, err}
	}()
	<-fs.cleanArrived
	close(hold.release)
	var lr result
	select {
	case lr = <-late:
	case <-fs.cleanArrived:
		lr = result{err: errors.New("the second capture cleaned the sandbox too (it captures as well)")}
	case <-time.After(30 * time.Second):
		t.Fatal("the second capture did not return")
	}
	close(fs.cleanGate)
	er := <-early
	if !errors.Is(lr.err, errcode.ErrConflict) {
		t.Errorf("the capture that lost: %+v, %v; want ErrConflict", lr.ses, lr.err)
	}
	if er.err != nil || er.ses.State != templates.SessionCaptured || er.ses.Template == "" {
		t.Errorf("the capture that won: %+v, %v", er.ses, er.err)
	}
	if cur, err := svc.Session(ctx, tplOps, ses.ID); err != nil || cur.State != templates.SessionCaptured {
		t.Errorf("session at the end: %+v, %v", cur, err)
	}
	list, _ := svc.List(ctx, tplOps, w.env.ID)
	captured := 0
	for _, tpl := range list {
		if tpl.State == templates.StateCaptured {
			captured++
		}
	}
	if captured != 1 {
		t.Errorf("%d captured templates of %d, want 1", captured, len(list))
	}
	if live := liveSandboxes(w.fk); len(live) != 0 {
		t.Errorf("sandboxes left: %v", live)
	}
}

// Provider errors that echo a secret value are redacted where setup keeps
// or returns them: the failed template's stored reason (a capture) and
// the error of OpenTerminal.
func TestSetupCaptureAndTerminalErrorsRedacted(t *testing.T) {
	ctx := context.Background()
	const secret = "fake-key-19cd-echoed"
	w, _ := newSetupWorld(t, nil, &fake.Options{APIKey: secret})
	svc := w.sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	echo := errors.New("provider refused the request signed with " + secret)
	fakectl.Of(w.fk).Inject(fakectl.Fault{Op: "terminal", Err: echo})
	fakectl.Of(w.fk).Inject(fakectl.Fault{Op: "capture", Err: echo})
	if _, err := svc.OpenTerminal(ctx, tplOps, ses.ID, 24, 80); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("OpenTerminal with a provider error echoing the secret: %v", err)
	}
	got, err := svc.CaptureSession(ctx, tplOps, ses.ID, false)
	if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(got.FailureReason, secret) {
		t.Errorf("capture with a provider error echoing the secret: %+v, %v", got, err)
	}
	list, err := svc.List(ctx, tplOps, w.env.ID)
	if err != nil || len(list) != 1 {
		t.Fatalf("templates after the failed capture: %d, %v", len(list), err)
	}
	if list[0].State != templates.StateFailed || strings.Contains(list[0].FailureReason, secret) || list[0].FailureReason == "" {
		t.Errorf("the failed template's stored reason: %s %q", list[0].State, list[0].FailureReason)
	}
}
