package probe

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
)

// gvisorHandlers make the fake's sandboxes look like gVisor's to a task:
// a kernel release of their own and a kernel log that names gVisor.
var gvisorHandlers = map[string]fake.HandlerFunc{
	"uname": func(_ context.Context, inv fake.Invocation) (int, error) {
		_, err := fmt.Fprintln(inv.Stdout, "4.4.0")
		return 0, err
	},
	"dmesg": func(_ context.Context, inv fake.Invocation) (int, error) {
		_, err := fmt.Fprintln(inv.Stdout, "[   0.000000] Starting gVisor...")
		return 0, err
	},
}

// The probe measures the isolation inside the sandbox, records it in the
// qualification, and fails with isolation_mismatch (nothing recorded, the
// sandbox destroyed) when the sandbox shows less than the driver declares.
//
// Requirements: ISO-1.
func TestProbeMeasuresIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		declared drivers.Isolation
		handlers map[string]fake.HandlerFunc
		measured string
		ok       bool
	}{
		{"container on the engine's kernel", drivers.IsolationContainer, nil, "container", true},
		{"gvisor declared on the engine's kernel", drivers.IsolationGVisor, nil, "container", false},
		{"gvisor under gVisor", drivers.IsolationGVisor, gvisorHandlers, "gvisor", true},
		{"microvm declared under gVisor", drivers.IsolationMicroVM, gvisorHandlers, "gvisor", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{fake: &fake.Options{Isolation: tc.declared, Handlers: tc.handlers}})
			img := w.fake.AddImage("registry.fake.test/team/app:v1")
			env := w.create(t, "iso", img.String())
			res := w.probe(t, env.ID, "acme")
			if res.Isolation != tc.measured || !strings.Contains(res.IsolationEvidence, "6.1.0-18-amd64") {
				t.Errorf("isolation %q (%s), want %s measured against the fake's kernel", res.Isolation, res.IsolationEvidence, tc.measured)
			}
			st, ran := stageOf(res, stageIsolation)
			if c := res.Cleanup; c == nil || !c.Confirmed {
				t.Errorf("cleanup %+v", c)
			}
			rec, err := w.quals.GetQualification(ctx, "acme", env.ID)
			if tc.ok {
				if !res.OK || !ran || !st.OK || !res.PlatformQualificationRecorded || err != nil || rec.Isolation != tc.measured {
					t.Fatalf("probe ok %v (%s), isolation stage %+v, recorded %v, record %+v (%v)", res.OK, res.Summary, st, res.PlatformQualificationRecorded, rec, err)
				}
				v, err := w.prober.Qualification(ctx, admin, env.ID, "acme")
				if err != nil || !v.Qualified || v.Isolation != tc.measured {
					t.Errorf("view %+v, %v; want qualified with isolation %s", v, err, tc.measured)
				}
				return
			}
			if res.OK || res.Code != reason.IsolationMismatch || !ran || st.Code != reason.IsolationMismatch || res.PlatformQualificationRecorded || err == nil {
				t.Fatalf("probe ok %v code %s, isolation stage %+v, recorded %v, record %v; want isolation_mismatch and no record", res.OK, res.Code, st, res.PlatformQualificationRecorded, err)
			}
			if !strings.Contains(st.Message, "declares isolation "+tc.declared.String()) || !strings.Contains(st.Message, "measures "+tc.measured) || !strings.Contains(strings.ToLower(st.Message), "provider fake") {
				t.Errorf("message %q does not name the target and both levels", st.Message)
			}
			if errcode.ErrorCode(reason.Code(res.Code)) != errcode.Conflict {
				t.Errorf("code %s maps to %v", res.Code, reason.Code(res.Code))
			}
			if d := diagCode(res); d != qualify.ProbeFailed {
				t.Errorf("diagnostic %s, want probe_failed", d)
			}
		})
	}
}

// A record measured under one isolation does not qualify a target that
// now declares more (an image qualified under runc is not qualified under
// runsc), and a record whose measured level meets the declared one does.
//
// Requirements: ISO-2.
func TestIsolationIsPartOfTheQualification(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{fake: &fake.Options{Isolation: drivers.IsolationContainer}})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "iso", img.String())
	if res := w.probe(t, env.ID, "acme"); !res.PlatformQualificationRecorded {
		t.Fatalf("not recorded: %s", res.Summary)
	}
	ctx := context.Background()
	rec, _ := w.quals.GetQualification(ctx, "acme", env.ID)
	subj, err := w.prober.currentSubject(ctx, env.ID, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if ok, d := qualify.Valid(rec, subj); !ok || subj.Isolation != "container" {
		t.Fatalf("valid %v (%s), subject isolation %q", ok, d, subj.Isolation)
	}
	subj.Isolation = "gvisor"
	if ok, d := qualify.Valid(rec, subj); ok || d.Code != qualify.Stale || !strings.Contains(d.Message, "isolation gvisor") {
		t.Errorf("a container record for a gvisor target: valid %v, %s", ok, d)
	}
}
