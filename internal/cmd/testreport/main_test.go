package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// A failed test's output is printed whole (its subtests' too), and its
// messages again at the end without the logs around them; a passing
// test's only when -show names it, a package that failed with a test still
// running prints that test's output, and the summary counts top-level tests
// and lists the slowest first.
func TestReport(t *testing.T) {
	var b strings.Builder
	r := newReport(&b, regexp.MustCompile("^TestShown$"))
	for _, e := range []event{
		{Action: "output", Package: "p", Test: "TestOK", Output: "quiet\n"},
		{Action: "pass", Package: "p", Test: "TestOK", Elapsed: 1},
		{Action: "output", Package: "p", Test: "TestShown", Output: "counts\n"},
		{Action: "pass", Package: "p", Test: "TestShown", Elapsed: 0.5},
		{Action: "output", Package: "p", Test: "TestBad/sub", Output: "sub said why\n"},
		{Action: "output", Package: "p", Test: "TestBad/sub", Output: "        bad_test.go:12: the stop: want a proof\n"},
		{Action: "output", Package: "p", Test: "TestBad", Output: "    time=2026 level=INFO msg=request\n"},
		{Action: "fail", Package: "p", Test: "TestBad/sub", Elapsed: 3},
		{Action: "output", Package: "p", Test: "TestBad", Output: "--- FAIL: TestBad\n"},
		{Action: "fail", Package: "p", Test: "TestBad", Elapsed: 3},
		{Action: "skip", Package: "p", Test: "TestSkip"},
		{Action: "output", Package: "p", Output: "FAIL\tp\t4s\n"},
		{Action: "fail", Package: "p", Elapsed: 4},
		{Action: "output", Package: "q", Test: "TestHang", Output: "panic: test timed out\n"},
		{Action: "output", Package: "q", Output: "FAIL\tq\t9s\n"},
		{Action: "fail", Package: "q", Elapsed: 9},
	} {
		r.event(e)
	}
	r.summary(2)
	got := b.String()
	for _, want := range []string{"counts\n", "sub said why\n", "--- FAIL: TestBad\n", "FAIL\tp\t4s\n", "panic: test timed out\n", "q TestHang (did not end)", "3.0s  p TestBad\n", "9.0s  q\n", "2 passed, 1 failed, 1 skipped\n", "skipped:\n  p TestSkip\n",
		"why they failed (the tests' own messages; their whole output is above):\n  p TestBad\n    bad_test.go:12: the stop: want a proof\n\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet") {
		t.Errorf("report prints a passing test's output that -show does not name:\n%s", got)
	}
	if i, j := strings.Index(got, "p TestBad\n"), strings.Index(got, "p TestOK\n"); i < 0 || j < 0 || i > j {
		t.Errorf("slowest tests are not listed slowest first:\n%s", got)
	}
}

// testreport's own flags come first; the first other argument and all after
// it are go test's, flags included.
func TestOwnFlags(t *testing.T) {
	for _, c := range []struct {
		args, own, rest []string
	}{
		{[]string{"-slowest", "5", "-show=^X$", "-race", "-timeout", "30m", "./..."}, []string{"-slowest", "5", "-show=^X$"}, []string{"-race", "-timeout", "30m", "./..."}},
		{[]string{"./..."}, nil, []string{"./..."}},
		{[]string{"-slowest=3", "--", "-race", "./..."}, []string{"-slowest=3"}, []string{"-race", "./..."}},
		{[]string{"-show", "x"}, []string{"-show", "x"}, nil},
		{[]string{"-events", "/tmp/e.json", "-slowest", "2", "-p", "4", "./..."}, []string{"-events", "/tmp/e.json", "-slowest", "2"}, []string{"-p", "4", "./..."}},
		{[]string{"-run", "TestShow", "-show", "x"}, nil, []string{"-run", "TestShow", "-show", "x"}},
	} {
		own, rest := ownFlags(c.args)
		if strings.Join(own, " ") != strings.Join(c.own, " ") || strings.Join(rest, " ") != strings.Join(c.rest, " ") {
			t.Errorf("ownFlags(%q) = %q, %q; want %q, %q", c.args, own, rest, c.own, c.rest)
		}
	}
}

// The usage line gives the wall time, the CPU of the process and the
// children it waited for, and that CPU as a share of the cores.
func TestUsage(t *testing.T) {
	// A child that computes: its CPU is counted in the parent's wait.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if cpu <= 0 {
		t.Fatalf("the child used no CPU (%v): the test proves nothing", cpu)
	}
	// A wall time of twice the CPU on one core is a 50% share.
	got := usage(2*cpu, cmd.ProcessState, 1)
	want := fmt.Sprintf("go test: %.0fs wall, %.0fs CPU (user+sys of go test, the compiler and the test binaries), 50%% of 1 cores", (2 * cpu).Seconds(), cpu.Seconds())
	if got != want {
		t.Errorf("usage = %q, want %q", got, want)
	}
}
