package berth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/templates"
)

// A terminal token is redeemed only by the principal it was minted for, on
// its path: another principal who presents it (one who saw the URL), or
// the right principal on another path, is refused (401, no upgrade) and
// the token stays redeemable by its owner (issue 51).
func TestTerminalTokenNotBurnedByAnotherPrincipal(t *testing.T) {
	ctx := context.Background()
	w, _ := newSetupWorld(t, nil, nil)
	svc := w.sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = svc.Cancel(ctx, tplOps, ses.ID) }()
	other := authz.Principal{ID: "ops-2", Role: authz.RoleInstanceAdmin}
	who := map[string]authz.Principal{"ops": tplOps, "ops-2": other}
	h := svc.TerminalHandler(templates.TerminalHandlerOptions{
		Principal: func(r *http.Request) (authz.Principal, error) { return who[r.Header.Get("X-Test-As")], nil }})
	mux := http.NewServeMux()
	mux.Handle("/term", h)
	mux.Handle("/other", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	m, err := svc.MintTerminalToken(ctx, tplOps, ses.ID, "/term")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, as string }{
		{"another principal", "/term", "ops-2"},
		{"its principal on another path", "/other", "ops"},
	} {
		_, resp, err := termDial(t, srv.URL, tc.path, tc.as, url.Values{"token": {m.Token}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %v, response %v; want 401 before any upgrade", tc.name, err, resp)
		}
	}
	own, _, err := termDial(t, srv.URL, "/term", "ops", url.Values{"token": {m.Token}})
	if err != nil {
		t.Fatalf("the owner after the refusals: %v (the token was used up by someone else)", err)
	}
	if own.first["type"] != "attached" {
		t.Errorf("the owner's first frame %v, want attached", own.first)
	}
	own.c.CloseNow()
}
