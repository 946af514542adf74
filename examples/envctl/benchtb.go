package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
)

// benchTB is the testing.TB that envctl bench hands to internal/testenv
// and internal/testimage, so that the benchmark starts its real
// components (sshd, a loopback registry, test images) by the tests' own
// code paths. It implements what those packages call: Fatal ends the
// workload's goroutine (runtime.Goexit, as testing does) with an error,
// Skip ends it as skipped with the reason (a missing component), and the
// cleanups run, last registered first, when the workload ends
// (finish). The embedded testing.TB is nil: a method not implemented
// here panics, which run turns into the workload's error.
type benchTB struct {
	testing.TB
	name string
	ctx  context.Context

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	skipped  bool
	msgs     []string
}

func (t *benchTB) Helper()                  {}
func (t *benchTB) Name() string             { return t.name }
func (t *benchTB) Context() context.Context { return t.ctx }
func (t *benchTB) Log(args ...any)          {}
func (t *benchTB) Logf(string, ...any)      {}

func (t *benchTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *benchTB) record(failed, skipped bool, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = t.failed || failed
	t.skipped = t.skipped || skipped
	if msg != "" {
		t.msgs = append(t.msgs, msg)
	}
}

func (t *benchTB) Fail()             { t.record(true, false, "") }
func (t *benchTB) Error(args ...any) { t.record(true, false, fmt.Sprint(args...)) }
func (t *benchTB) Errorf(format string, args ...any) {
	t.record(true, false, fmt.Sprintf(format, args...))
}
func (t *benchTB) FailNow()          { t.record(true, false, ""); runtime.Goexit() }
func (t *benchTB) Fatal(args ...any) { t.record(true, false, fmt.Sprint(args...)); runtime.Goexit() }
func (t *benchTB) Fatalf(format string, args ...any) {
	t.record(true, false, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (t *benchTB) SkipNow()         { t.record(false, true, ""); runtime.Goexit() }
func (t *benchTB) Skip(args ...any) { t.record(false, true, fmt.Sprint(args...)); runtime.Goexit() }
func (t *benchTB) Skipf(format string, args ...any) {
	t.record(false, true, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (t *benchTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *benchTB) Skipped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skipped
}

// TempDir makes a new directory that the cleanups remove.
func (t *benchTB) TempDir() string {
	dir, err := os.MkdirTemp("", "envctl-bench-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// run runs f on its own goroutine (Fatal and Skip end it) and then the
// cleanups. It returns the reason of a skip, or an error for a failure
// (or a panic).
func (t *benchTB) run(f func(t *benchTB)) (skipped string, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				t.record(true, false, fmt.Sprintf("panic: %v", r))
			}
		}()
		f(t)
	}()
	<-done
	t.finish()
	t.mu.Lock()
	defer t.mu.Unlock()
	msg := fmt.Sprint(t.msgs)
	if len(t.msgs) == 1 {
		msg = t.msgs[0]
	}
	switch {
	case t.failed:
		return "", fmt.Errorf("%s: %s", t.name, msg)
	case t.skipped:
		return msg, nil
	}
	return "", nil
}

// finish runs the cleanups, last registered first; a cleanup that fails
// (Fatal) ends only itself.
func (t *benchTB) finish() {
	for {
		t.mu.Lock()
		if len(t.cleanups) == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[len(t.cleanups)-1]
		t.cleanups = t.cleanups[:len(t.cleanups)-1]
		t.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { _ = recover() }()
			f()
		}()
		<-done
	}
}
