package prpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/qualification"
)

func mustEnvelope(t *testing.T, typ Type, seq uint64, body any) Envelope {
	t.Helper()
	e, err := NewEnvelope(1, typ, "m-1", "s_1", body)
	if err != nil {
		t.Fatal(err)
	}
	e.Seq = seq
	return e
}

// PRP-1: output bytes survive the JSON envelope byte for byte, invalid
// UTF-8 included.
func TestOutputBytesRoundTrip(t *testing.T) {
	t.Parallel()
	data := []byte{0xff, 0xfe, 'a', 0x00, 0xc3, 0x28, '\n'}
	e := mustEnvelope(t, TypeEvent, 7, prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Offset: 42, Data: data}})
	e.Ack = 3
	frame, err := EncodeFrame(e, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFrame(frame, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 7 || got.Ack != 3 || got.Session != "s_1" || got.Protocol != Protocol {
		t.Errorf("header = %+v", got)
	}
	var ev prp.Event
	if err := DecodeBody(got, &ev); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ev.Output.Data, data) || ev.Output.Offset != 42 {
		t.Errorf("output = %+v, want data %v at 42", ev.Output, data)
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	t.Parallel()
	valid := `{"protocol":"berth.prp","version":1,"type":"ack","id":"m1","ack":4}`
	if _, err := DecodeFrame([]byte(valid), 0); err != nil {
		t.Fatalf("valid frame: %v", err)
	}
	for _, tc := range []struct{ name, frame, field string }{
		{"wrong protocol", `{"protocol":"x","version":1,"type":"ack","id":"m1"}`, "protocol"},
		{"zero version", `{"protocol":"berth.prp","version":0,"type":"ack","id":"m1"}`, "version"},
		{"unknown type", `{"protocol":"berth.prp","version":1,"type":"nope","id":"m1"}`, "type"},
		{"bad id", `{"protocol":"berth.prp","version":1,"type":"ack","id":"a b"}`, "id"},
		{"command without seq", `{"protocol":"berth.prp","version":1,"type":"command","id":"m1","body":{}}`, "seq"},
		{"command without body", `{"protocol":"berth.prp","version":1,"type":"command","id":"m1","seq":1}`, "body"},
		{"hello with seq", `{"protocol":"berth.prp","version":1,"type":"hello","id":"m1","seq":1,"body":{}}`, "seq"},
		{"unknown field", `{"protocol":"berth.prp","version":1,"type":"ack","id":"m1","extra":1}`, "extra"},
		{"trailing data", valid + `{}`, "trailing"},
		{"not json", `nope`, "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeFrame([]byte(tc.frame), 0)
			if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("DecodeFrame = %v, want ErrFrame naming %q", err, tc.field)
			}
		})
	}
}

// PRP-1: a frame over the limit is refused on both ends.
func TestFrameOverLimit(t *testing.T) {
	t.Parallel()
	e := mustEnvelope(t, TypeEvent, 1, prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Data: make([]byte, 20000)}})
	if _, err := EncodeFrame(e, MinMaxFrame); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("EncodeFrame over the limit = %v, want ErrFrameTooLarge", err)
	}
	frame, err := EncodeFrame(e, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeFrame(frame, MinMaxFrame); !errors.Is(err, ErrFrameTooLarge) || CodeOf(err) != "frame_too_large" {
		t.Errorf("DecodeFrame over the limit = %v (code %q), want ErrFrameTooLarge", err, CodeOf(err))
	}
}

func TestWelcomeValidate(t *testing.T) {
	t.Parallel()
	w := Welcome{Version: 1, Session: "s_1", Heartbeat: time.Second, DeadAfter: 3 * time.Second, MaxFrame: DefaultMaxFrame,
		MaxOutputChunk: DefaultMaxOutputChunk, MaxUnackedBytes: DefaultMaxUnackedBytes, NextCommandSeq: 1}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	big := w
	big.MaxOutputChunk = DefaultMaxFrame
	if err := big.Validate(); err == nil || !strings.Contains(err.Error(), "max_output_chunk") {
		t.Errorf("a chunk that cannot fit a frame: %v", err)
	}
	small := w
	small.MaxFrame = 100
	if err := small.Validate(); err == nil || !strings.Contains(err.Error(), "max_frame") {
		t.Errorf("a tiny max frame: %v", err)
	}
}

func TestHelloRoundTrip(t *testing.T) {
	t.Parallel()
	h := Hello{MinVersion: 1, MaxVersion: 1, RunnerVersion: "v0.1", BinarySHA256: strings.Repeat("ab", 32),
		Capabilities: []Capability{CapTasks}, Resume: Resume{LastCommandSeq: 4, OldestUnackedEvent: 9, NextEventSeq: 12}}
	h.Platform = mustPlatform("linux/amd64 libc=glibc:2.36 kernel=6.1.0")
	e := mustEnvelope(t, TypeHello, 0, h)
	frame, err := EncodeFrame(e, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFrame(frame, 0)
	if err != nil {
		t.Fatal(err)
	}
	var h2 Hello
	if err := DecodeBody(got, &h2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(h, h2); diff != "" {
		t.Errorf("hello round trip (-want +got):\n%s", diff)
	}
	var raw map[string]any
	_ = json.Unmarshal(got.Body, &raw)
	if raw["platform"] != "linux/amd64 libc=glibc:2.36 kernel=6.1.0" {
		t.Errorf("platform travels as %v, want its text form", raw["platform"])
	}
}

func TestCheckSeq(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		last, seq uint64
		want      SeqVerdict
	}{{0, 1, SeqNext}, {5, 6, SeqNext}, {5, 5, SeqDuplicate}, {5, 1, SeqDuplicate}, {5, 7, SeqGap}, {0, 2, SeqGap}} {
		if got := CheckSeq(tc.last, tc.seq); got != tc.want {
			t.Errorf("CheckSeq(%d, %d) = %v, want %v", tc.last, tc.seq, got, tc.want)
		}
	}
}

func TestNegotiate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rmin, rmax, cmin, cmax, want int
	}{{1, 1, 1, 1, 1}, {1, 3, 2, 5, 3}, {2, 4, 1, 2, 2}, {3, 4, 1, 2, 0}, {1, 1, 2, 3, 0}, {2, 1, 1, 3, 0}} {
		got, err := Negotiate(tc.rmin, tc.rmax, tc.cmin, tc.cmax)
		if tc.want == 0 {
			if !errors.Is(err, ErrVersionUnsupported) || CodeOf(err) != "version_unsupported" {
				t.Errorf("Negotiate(%d,%d,%d,%d) = %d, %v; want ErrVersionUnsupported", tc.rmin, tc.rmax, tc.cmin, tc.cmax, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Negotiate(%d,%d,%d,%d) = %d, %v; want %d", tc.rmin, tc.rmax, tc.cmin, tc.cmax, got, err, tc.want)
		}
	}
	got := GrantCapabilities([]Capability{CapStdin, CapTasks, CapTasks, "future"}, []Capability{CapTasks, CapStdin})
	if diff := cmp.Diff([]Capability{CapStdin, CapTasks}, got); diff != "" {
		t.Errorf("GrantCapabilities (-want +got):\n%s", diff)
	}
}

// mustPlatform is qualification.ParsePlatform that panics on error.
func mustPlatform(s string) qualification.Platform {
	p, err := qualification.ParsePlatform(s)
	if err != nil {
		panic(err)
	}
	return p
}
