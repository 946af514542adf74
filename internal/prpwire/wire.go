package prpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/berthdev/berth/internal/prp"

	"github.com/berthdev/berth/errcode"
)

// Protocol is the protocol name every Envelope carries.
const Protocol = "berth.prp"

// Subprotocol is the WebSocket subprotocol both sides negotiate; a
// connection that did not negotiate it is closed (PRP-1).
const Subprotocol = "berth.prp.v1"

// The protocol versions this package speaks. Features are gated by
// capability flags, not by minor versions (PRP-3).
const (
	MinVersion = 1
	MaxVersion = 1
)

// Frame limits. DefaultMaxFrame is the read limit each side sets right
// after Dial or Accept, before the welcome says otherwise; the controller
// chooses the session's limits and sends them in the Welcome.
const (
	// DefaultMaxFrame is the default maximum size of one frame (1 MiB).
	DefaultMaxFrame = 1 << 20
	// MinMaxFrame is the smallest MaxFrame a Welcome may set (16 KiB): a
	// hello or a stop proof must always fit.
	MinMaxFrame = 16 << 10
	// HardMaxFrame is the largest frame this package ever decodes (16 MiB).
	HardMaxFrame = 16 << 20
	// DefaultMaxOutputChunk is the default maximum of output bytes one
	// output event carries (256 KiB; a pipe read returns at most what the
	// pipe holds, so that a chunk is sent without waiting for more).
	DefaultMaxOutputChunk = 256 << 10
	// DefaultMaxUnackedBytes is the default bound of the runner's outbox
	// (16 MiB of encoded events not yet acknowledged): the controller syncs
	// and acks in batches, and the runner streams on meanwhile.
	DefaultMaxUnackedBytes = 16 << 20
)

// Type is the type of an Envelope.
type Type string

// The envelope types.
const (
	// TypeHello is the runner's first message (body Hello).
	TypeHello Type = "hello"
	// TypeWelcome is the controller's answer to a hello (body Welcome).
	TypeWelcome Type = "welcome"
	// TypeCommand carries a prp.Command on the controller's contiguous
	// sequence (Envelope.Seq).
	TypeCommand Type = "command"
	// TypeEvent carries an prp.Event on the runner's contiguous sequence.
	TypeEvent Type = "event"
	// TypeAck carries only a cumulative acknowledgement (Envelope.Ack).
	TypeAck Type = "ack"
	// TypeToken carries a renewed connection token (body TokenRenewal).
	TypeToken Type = "token"
	// TypeSecrets carries the secret values of the next task.start command
	// (body SecretValues); controller to runner only, never sequenced,
	// journaled or acked.
	TypeSecrets Type = "secrets"
)

// Close codes (WebSocket application range 4000-4999) with which either
// side closes a connection. A closed session resumes on the next
// connection (PRP-4, PRP-5).
const (
	// CloseSequenceGap: a command or event arrived with a sequence number
	// past the next expected one.
	CloseSequenceGap = 4001
	// CloseProtocolError: a frame could not be decoded or broke the protocol.
	CloseProtocolError = 4002
	// CloseUnauthorized: the connection token is invalid or expired.
	CloseUnauthorized = 4003
	// CloseVersionUnsupported: no protocol version is supported by both.
	CloseVersionUnsupported = 4004
	// CloseSubprotocol: the connection did not negotiate Subprotocol.
	CloseSubprotocol = 4005
	// CloseDead: the peer missed its heartbeats.
	CloseDead = 4006
)

// Envelope is one JSON text frame (PRP-1). Seq is the sender's sequence
// number for commands (controller) and events (runner), zero otherwise; Ack
// is the sender's cumulative acknowledgement of the other side's sequence.
type Envelope struct {
	Protocol string          `json:"protocol"`
	Version  int             `json:"version"`
	Type     Type            `json:"type"`
	ID       string          `json:"id"`
	Session  string          `json:"session,omitempty"`
	Seq      uint64          `json:"seq,omitempty"`
	Ack      uint64          `json:"ack,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
}

// ErrFrame is returned (wrapped, naming the field) when a frame is not a
// valid Envelope.
var ErrFrame = errcode.New(errcode.Invalid, "prp: invalid frame")

// ErrFrameTooLarge is returned when a frame exceeds the maximum frame size.
var ErrFrameTooLarge = errcode.New(errcode.Invalid, "prp: frame too large")

// Validate checks the envelope's header fields; it does not look into Body.
func (e *Envelope) Validate() error {
	switch {
	case e.Protocol != Protocol:
		return fmt.Errorf("%w: field protocol is %q, want %q", ErrFrame, e.Protocol, Protocol)
	case e.Version < 1 || e.Version > 1000:
		return fmt.Errorf("%w: field version %d is out of range", ErrFrame, e.Version)
	case !ValidID(e.ID):
		return fmt.Errorf("%w: field id %q is not a valid id", ErrFrame, e.ID)
	case e.Session != "" && !ValidID(e.Session):
		return fmt.Errorf("%w: field session %q is not a valid id", ErrFrame, e.Session)
	}
	switch e.Type {
	case TypeHello, TypeWelcome, TypeAck, TypeToken, TypeSecrets:
		if e.Seq != 0 {
			return fmt.Errorf("%w: field seq must be 0 in a %s", ErrFrame, e.Type)
		}
	case TypeCommand, TypeEvent:
		if e.Seq == 0 {
			return fmt.Errorf("%w: field seq must be positive in a %s", ErrFrame, e.Type)
		}
		if len(e.Body) == 0 {
			return fmt.Errorf("%w: field body is missing in a %s", ErrFrame, e.Type)
		}
	default:
		return fmt.Errorf("%w: field type %q is unknown", ErrFrame, e.Type)
	}
	return nil
}

// DecodeFrame decodes and validates one frame of at most maxFrame bytes
// (HardMaxFrame if maxFrame <= 0 or larger). Unknown fields are rejected;
// the body is left raw for DecodeBody.
func DecodeFrame(frame []byte, maxFrame int) (Envelope, error) {
	if maxFrame <= 0 || maxFrame > HardMaxFrame {
		maxFrame = HardMaxFrame
	}
	if len(frame) > maxFrame {
		return Envelope{}, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, len(frame), maxFrame)
	}
	var e Envelope
	if err := strictUnmarshal(frame, &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	if err := e.Validate(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// EncodeFrame validates e and encodes it; the result is at most maxFrame
// bytes (HardMaxFrame if maxFrame <= 0) or ErrFrameTooLarge.
func EncodeFrame(e Envelope, maxFrame int) ([]byte, error) {
	if maxFrame <= 0 || maxFrame > HardMaxFrame {
		maxFrame = HardMaxFrame
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	if len(b) > maxFrame {
		return nil, fmt.Errorf("%w: %s of %d bytes, limit %d", ErrFrameTooLarge, e.Type, len(b), maxFrame)
	}
	return b, nil
}

// NewEnvelope returns an envelope of type t with id and session, version v,
// and body marshalled as JSON (no body if body is nil).
func NewEnvelope(v int, t Type, id, session string, body any) (Envelope, error) {
	e := Envelope{Protocol: Protocol, Version: v, Type: t, ID: id, Session: session}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Envelope{}, fmt.Errorf("prp: encode %s body: %w", t, err)
		}
		e.Body = b
	}
	return e, nil
}

// DecodeBody decodes e's body into v, rejecting unknown fields, and then
// validates v: a *prp.Command by ValidateCommand, a *prp.Event by
// ValidateEvent, any other v that has a Validate method by it.
func DecodeBody(e Envelope, v any) error {
	if len(e.Body) == 0 {
		return fmt.Errorf("%w: %s has no body", ErrFrame, e.Type)
	}
	if err := strictUnmarshal(e.Body, v); err != nil {
		return fmt.Errorf("%w: %s body: %v", ErrFrame, e.Type, err)
	}
	var err error
	switch val := v.(type) {
	case *prp.Command:
		err = ValidateCommand(*val)
	case *prp.Event:
		err = ValidateEvent(*val)
	case interface{ Validate() error }:
		err = val.Validate()
	}
	if err != nil {
		return fmt.Errorf("%w: %s body: %v", ErrFrame, e.Type, err)
	}
	return nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
