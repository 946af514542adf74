package daytona

import (
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers/config"
)

// Error bodies: the API's and toolbox's {"message"}, the PTY controller's
// {"error"} (issue #13 item 7), raw text otherwise; each scrubbed before
// it is shortened.
func TestErrorMessage(t *testing.T) {
	t.Parallel()
	c := &client{key: "dtn_0123456789abcdef"}
	for body, want := range map[string]string{
		`{"statusCode":404,"message":"Sandbox x not found","error":"Not Found"}`: "Sandbox x not found",
		`{"error":"PTY session not found"}`:                                      "PTY session not found",
		`plain text`:                                                             "plain text",
		`{"message":"bad key dtn_0123456789abcdef"}`:                             "bad key " + config.Redacted,
	} {
		if got := errorMessage([]byte(body), c.scrub); got != want {
			t.Errorf("errorMessage(%s) = %q, want %q", body, got, want)
		}
	}
}

// redactSecret removes every run of 8 or more bytes of the secret, and
// leaves shorter coincidences alone (issue #13 item 9).
func TestRedactSecret(t *testing.T) {
	t.Parallel()
	key := "dtn_0123456789abcdef"
	for in, want := range map[string]string{
		"x " + key + " y":         "x " + config.Redacted + " y",
		"cut: " + key[:10]:        "cut: " + config.Redacted,
		"tail " + key[11:]:        "tail " + config.Redacted,
		"short dtn_0123 ok":       "short " + config.Redacted + " ok", // 8 bytes of the key
		"seven dtn_012 ok":        "seven dtn_012 ok",
		key + key:                 config.Redacted + config.Redacted,
		"no secret here at all..": "no secret here at all..",
	} {
		got := redactSecret(in, key)
		if got != want {
			t.Errorf("redactSecret(%q) = %q, want %q", in, got, want)
		}
		for i := 0; i+8 <= len(key); i++ {
			if strings.Contains(got, key[i:i+8]) {
				t.Errorf("redactSecret(%q) = %q keeps %q", in, got, key[i:i+8])
			}
		}
	}
}
