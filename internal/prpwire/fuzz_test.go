package prpwire

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
)

// FuzzDecodeFrame: the decoder never panics, and whatever it accepts
// re-encodes to a frame it accepts again with the same header.
func FuzzDecodeFrame(f *testing.F) {
	f.Add([]byte(`{"protocol":"berth.prp","version":1,"type":"ack","id":"m1","ack":4}`))
	f.Add([]byte(`{"protocol":"berth.prp","version":1,"type":"event","id":"m1","session":"s_1","seq":3,"body":{"kind":"task.output","task_id":"t","output":{"stream":"stdout","offset":0,"data":"/w=="}}}`))
	f.Add([]byte(`{"protocol":"berth.prp","version":1,"type":"command","id":"m1","seq":1,"body":{"id":"c1"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		e, err := DecodeFrame(frame, MinMaxFrame)
		if err != nil {
			return
		}
		again, err := EncodeFrame(e, 0)
		if err != nil {
			t.Fatalf("an accepted frame does not re-encode: %v", err)
		}
		e2, err := DecodeFrame(again, 0)
		if err != nil || e2.Type != e.Type || e2.Seq != e.Seq || e2.Ack != e.Ack || e2.ID != e.ID {
			t.Fatalf("re-decoded %+v, %v; want %+v", e2, err, e)
		}
		switch e.Type {
		case TypeCommand:
			var c prp.Command
			_ = DecodeBody(e, &c)
		case TypeEvent:
			var ev prp.Event
			_ = DecodeBody(e, &ev)
		case TypeHello:
			var h Hello
			_ = DecodeBody(e, &h)
		case TypeWelcome:
			var w Welcome
			_ = DecodeBody(e, &w)
		}
	})
}

// FuzzParseCredentials: the ticket and token parsers never panic, never
// accept what they did not produce, and never quote their input in errors.
func FuzzParseCredentials(f *testing.F) {
	s, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("k", 32))})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0).UTC()
	tok, err := Mint(s, Claims{Lease: "l", Run: "r", Company: "c", Scope: prp.ScopeTask, Session: "s", IssuedAt: now, ExpiresAt: now.Add(time.Minute)})
	if err != nil {
		f.Fatal(err)
	}
	tk, _ := prp.NewTicket()
	f.Add(tok)
	f.Add(tk.String())
	f.Add("prpk1.k1..")
	f.Add("prpt1_")
	f.Fuzz(func(t *testing.T, in string) {
		if t2, err := prp.ParseTicket(in); err == nil {
			if t2.String() != strings.TrimSpace(in) {
				t.Fatalf("prp.ParseTicket(%q) accepted a non-canonical form %q", in, t2.String())
			}
		} else if len(in) > 12 && strings.Contains(err.Error(), in) {
			t.Fatalf("ticket error quotes the input: %v", err)
		}
		c, err := Verify(s, in, now)
		if err == nil && in != tok {
			// Only a token this signer minted verifies; the fuzzer cannot
			// forge HMAC-SHA-256, so any other accepted input is a bug.
			t.Fatalf("Verify accepted a token it did not mint: %q -> %+v", in, c)
		}
		if err != nil && len(in) > 12 && strings.Contains(err.Error(), in) {
			t.Fatalf("token error quotes the input: %v", err)
		}
	})
}

// FuzzDecodeOutputFrame: the binary output frame decoder never panics, and
// whatever it accepts re-encodes to the same bytes and is a valid output
// event.
func FuzzDecodeOutputFrame(f *testing.F) {
	for _, fr := range []OutputFrame{
		{Version: 1, Session: "s_1", Seq: 1, TaskID: "t", Output: prp.Output{Stream: prp.Stdout, Data: []byte("hello\n")}},
		{Version: 1, Session: "s_1", Seq: 1 << 40, Ack: 9, TaskID: "task.2", Output: prp.Output{Stream: prp.Stderr, Offset: 1 << 33, Data: []byte{0xff, 0, 0xc3, 0x28}}},
		{Version: 255, Session: strings.Repeat("s", 128), Seq: 3, TaskID: strings.Repeat("t", 128), Output: prp.Output{Stream: prp.Stdout}},
	} {
		b, err := AppendOutputFrame(nil, fr, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{BinaryOutputKind})
	f.Add([]byte(`{"protocol":"berth.prp"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		fr, err := DecodeOutputFrame(frame, MinMaxFrame)
		if err != nil {
			return
		}
		again, err := AppendOutputFrame(nil, fr, MinMaxFrame)
		if err != nil {
			t.Fatalf("an accepted frame does not re-encode: %v", err)
		}
		if !bytes.Equal(again, frame) {
			t.Fatalf("re-encoded %x, want %x", again, frame)
		}
		ev := fr.Event()
		if err := ValidateEvent(ev); err != nil {
			t.Fatalf("an accepted frame is not a valid event: %v", err)
		}
	})
}
