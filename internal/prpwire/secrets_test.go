package prpwire

import (
	"fmt"
	"strings"
	"testing"
)

// The secrets frame never shows a value: not in String, %v, %#v or an
// error about a value too long.
func TestSecretValuesNeverPrinted(t *testing.T) {
	t.Parallel()
	const canary = "canary-value-123"
	sv := SecretValues{CommandID: "c1", Values: []string{canary}}
	for _, s := range []string{sv.String(), fmt.Sprint(sv), fmt.Sprintf("%v %+v %#v", sv, sv, sv)} {
		if strings.Contains(s, canary) {
			t.Errorf("printed %q", s)
		}
	}
	long := SecretValues{CommandID: "c1", Values: []string{canary + strings.Repeat("x", MaxSecretValue)}}
	if err := long.Validate(); err == nil || strings.Contains(err.Error(), canary) {
		t.Errorf("Validate of a long value = %v, want an error without the value", err)
	}
	e, err := NewEnvelope(1, TypeSecrets, "m1", "s_1", sv)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := EncodeFrame(e, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFrame(frame, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	var back SecretValues
	if err := DecodeBody(got, &back); err != nil || back.Values[0] != canary {
		t.Errorf("round trip = %v, %v", back, err)
	}
	e.Seq = 1
	if _, err := EncodeFrame(e, DefaultMaxFrame); err == nil {
		t.Error("a sequenced secrets frame was accepted")
	}
}
