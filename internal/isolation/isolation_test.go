package isolation_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/isolation"
	"github.com/berthdev/berth/internal/qualify"
)

// internal/qualify ranks the levels by name (its floor imports no driver
// code): its order is drivers.Isolation's.
func TestQualifyRanksAsDrivers(t *testing.T) {
	for l := drivers.IsolationNone; l <= drivers.IsolationMicroVM; l++ {
		if got := qualify.IsolationRank(l.String()); got != int(l) {
			t.Errorf("qualify.IsolationRank(%q) = %d, want %d", l, got, l)
		}
	}
	if got := qualify.IsolationRank("vm"); got != -1 {
		t.Errorf("qualify.IsolationRank(\"vm\") = %d, want -1", got)
	}
}

// A host target measures none and runs nothing; a sandbox without a host
// kernel to compare with proves gvisor only by its kernel naming gVisor.
func TestMeasureWithoutHostKernel(t *testing.T) {
	ctx := context.Background()
	l, ev, err := isolation.Measure(ctx, true, "", nil)
	if l != drivers.IsolationNone || !ev.Host || err != nil {
		t.Errorf("host target: %s, %+v, %v", l, ev, err)
	}
	answer := func(out map[string]string) isolation.Exec {
		return func(_ context.Context, c drivers.Command) (*drivers.Result, error) {
			s, ok := out[c.Argv[0]]
			if !ok {
				return &drivers.Result{ExitCode: 127}, nil
			}
			return &drivers.Result{Stdout: []byte(s)}, nil
		}
	}
	if l, _, _ := isolation.Measure(ctx, false, "", answer(map[string]string{"uname": "6.1.0\n"})); l != drivers.IsolationNone {
		t.Errorf("unknown host kernel, no gVisor: %s, want none", l)
	}
	if l, _, _ := isolation.Measure(ctx, false, "", answer(map[string]string{"uname": "4.4.0\n", "dmesg": "Starting gVisor..."})); l != drivers.IsolationGVisor {
		t.Errorf("unknown host kernel, dmesg names gVisor: %s, want gvisor", l)
	}
	if l, _, _ := isolation.Measure(ctx, false, "6.1.0", answer(map[string]string{"uname": "6.1.0\n"})); l != drivers.IsolationContainer {
		t.Errorf("the host's kernel: %s, want container", l)
	}
}
