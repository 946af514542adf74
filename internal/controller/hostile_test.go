package controller_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// hostileRunner is a hand-written runner on one connection: the hostile peer
// of the intake tests, speaking the protocol directly.
type hostileRunner struct {
	t       *testing.T
	ws      *websocket.Conn
	session string
	welcome prpwire.Welcome
	// frames are the frames read after the welcome by a goroutine that
	// keeps reading (so that pings are answered while the test writes).
	frames chan []byte
}

// connectRaw dials s with token and sends a hello offering caps with
// the resume cursor r; it returns once welcomed.
func connectRaw(t *testing.T, s *server, token string, caps []prpwire.Capability, r prpwire.Resume) *hostileRunner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL(), "http")+prpwire.ConnectPath, &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{prpwire.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(prpwire.HardMaxFrame)
	t.Cleanup(func() { ws.CloseNow() })
	rr := &hostileRunner{t: t, ws: ws}
	rr.send(prpwire.TypeHello, 0, prpwire.Hello{MinVersion: 1, MaxVersion: prpwire.MaxVersion, RunnerVersion: "raw/1", BinarySHA256: strings.Repeat("ab", 32), Capabilities: caps, Resume: r})
	env := rr.next(ctx)
	if env.Type != prpwire.TypeWelcome {
		t.Fatalf("first frame = %s, want a welcome", env.Type)
	}
	if err := prpwire.DecodeBody(env, &rr.welcome); err != nil {
		t.Fatal(err)
	}
	rr.session = rr.welcome.Session
	rr.frames = make(chan []byte, 1024)
	go func() {
		defer close(rr.frames)
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			rr.frames <- b
		}
	}()
	return rr
}

// send writes one JSON frame.
func (rr *hostileRunner) send(typ prpwire.Type, seq uint64, body any) {
	rr.t.Helper()
	env, err := prpwire.NewEnvelope(1, typ, "m-"+string(typ), rr.session, body)
	if err != nil {
		rr.t.Fatal(err)
	}
	env.Seq = seq
	b, err := prpwire.EncodeFrame(env, 0)
	if err != nil {
		rr.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rr.ws.Write(ctx, websocket.MessageText, b); err != nil {
		rr.t.Fatal(err)
	}
}

// next reads the next frame.
func (rr *hostileRunner) next(ctx context.Context) prpwire.Envelope {
	rr.t.Helper()
	var b []byte
	if rr.frames == nil { // the welcome
		_, m, err := rr.ws.Read(ctx)
		if err != nil {
			rr.t.Fatalf("read: %v", err)
		}
		b = m
	} else {
		select {
		case m, ok := <-rr.frames:
			if !ok {
				rr.t.Fatal("read: the connection ended")
			}
			b = m
		case <-ctx.Done():
			rr.t.Fatal(ctx.Err())
		}
	}
	env, err := prpwire.DecodeFrame(b, prpwire.HardMaxFrame)
	if err != nil {
		rr.t.Fatal(err)
	}
	return env
}

// until reads frames until one of type typ for which ok (if set) holds,
// and returns it with the frames read before it.
func (rr *hostileRunner) until(typ prpwire.Type, ok func(prpwire.Envelope) bool) (prpwire.Envelope, []prpwire.Envelope) {
	rr.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var before []prpwire.Envelope
	for {
		env := rr.next(ctx)
		if env.Type == typ && (ok == nil || ok(env)) {
			return env, before
		}
		before = append(before, env)
	}
}

// event sends event seq as a JSON envelope.
func (rr *hostileRunner) event(seq uint64, ev prp.Event) { rr.send(prpwire.TypeEvent, seq, ev) }

// acked reads until the controller acks seq.
func (rr *hostileRunner) acked(seq uint64) {
	rr.t.Helper()
	rr.until(prpwire.TypeAck, func(e prpwire.Envelope) bool { return e.Ack >= seq })
}

// close closes the connection and waits until s no longer counts it.
func (rr *hostileRunner) close(s *server) {
	rr.ws.Close(websocket.StatusNormalClosure, "")
	for s.c.Connected(rr.session) {
		time.Sleep(5 * time.Millisecond)
	}
}
