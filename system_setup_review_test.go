package berth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/images/custom"
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
		ses, err := svc.Setup(ctx, tplOps, custom.SetupRequest{Environment: w.env.ID, Script: strings.NewReader(script)})
		if !errors.Is(err, custom.ErrStepFailed) || ses == nil || ses.State != custom.SessionFailed {
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
