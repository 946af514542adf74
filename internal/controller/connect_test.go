package controller_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// dialRaw exchanges a fresh ticket and dials the connect endpoint with the
// token and subprotocols, as a hand-written runner would.
func dialRaw(t *testing.T, s *server, subprotocols []string) *websocket.Conn {
	t.Helper()
	return dialRawTicket(t, s, s.ticket(t, prp.ScopeTask), subprotocols)
}

// dialRawTicket is dialRaw with the session of ticket.
func dialRawTicket(t *testing.T, s *server, ticket string, subprotocols []string) *websocket.Conn {
	t.Helper()
	_, resp := exchangeToken(t, s, ticket)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+resp)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL(), "http")+prpwire.ConnectPath, &websocket.DialOptions{HTTPHeader: h, Subprotocols: subprotocols})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

func hello(t *testing.T, minV, maxV int) []byte {
	t.Helper()
	env, err := prpwire.NewEnvelope(1, prpwire.TypeHello, "m1", "", prpwire.Hello{MinVersion: minV, MaxVersion: maxV, RunnerVersion: "raw/1", BinarySHA256: strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := prpwire.EncodeFrame(env, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PRP-1, PRP-3: the controller closes a connection without the
// subprotocol, one whose versions do not overlap, and one that sends a
// frame over the limit, each with its documented code.
func TestConnectionsThatBreakTheProtocolAreClosed(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{Options: controller.WithLimits(controller.Options{}, prpwire.Welcome{MaxFrame: prpwire.MinMaxFrame, MaxOutputChunk: 4 << 10, MaxUnackedBytes: prpwire.DefaultMaxUnackedBytes})})
	for _, tc := range []struct {
		name         string
		subprotocols []string
		frame        []byte
		want         websocket.StatusCode
	}{
		{"without the subprotocol", nil, hello(t, 1, 1), prpwire.CloseSubprotocol},
		{"with no common version", []string{prpwire.Subprotocol}, hello(t, 2, 3), prpwire.CloseVersionUnsupported},
		{"with a frame over the limit", []string{prpwire.Subprotocol}, []byte(`{"pad":"` + strings.Repeat("x", prpwire.MinMaxFrame) + `"}`), websocket.StatusMessageTooBig},
		{"with a first frame that is not a hello", []string{prpwire.Subprotocol}, []byte(`{"protocol":"berth.prp","version":1,"type":"ack","id":"m1"}`), prpwire.CloseProtocolError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := dialRaw(t, s, tc.subprotocols)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = ws.Write(ctx, websocket.MessageText, tc.frame) // may fail once the controller closed
			_, _, err := ws.Read(ctx)
			if got := websocket.CloseStatus(err); got != tc.want {
				t.Errorf("close status = %d (%v), want %d", got, err, tc.want)
			}
		})
	}
}

// exchangeToken exchanges ticket on s and returns the status and token.
func exchangeToken(t *testing.T, s *server, ticket string) (int, string) {
	t.Helper()
	code, body := exchangeBody(t, s, ticket, "lease-1")
	return code, body.Token
}
