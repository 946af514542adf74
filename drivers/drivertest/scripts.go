package drivertest

import (
	"context"
	"fmt"
	"io"
	"time"
)

// The suite's shell scripts of more than one command (run with sh -c).
const (
	scriptOutErr      = "echo out; echo err 1>&2"
	scriptPartial     = "echo partial; exit 1"
	scriptStream      = "echo one; echo two 1>&2; cat; exit 4"
	scriptReady       = "echo ready; sleep 300"
	scriptReadyStatus = "echo ready; sleep 300; exit $?"
)

// ScriptHandler does in Go what one of the suite's shell scripts does:
// it reads stdin, writes stdout and stderr, and returns the exit status;
// it returns when ctx ends.
type ScriptHandler func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (exitCode int, err error)

// ScriptHandlers returns, keyed by the script's text, what each shell
// script of more than one command that the suite sends (as sh -c SCRIPT)
// must do, for a driver that runs argv without a shell (the fake driver
// registers them as its handlers). A script added to the suite is added
// here, so such a driver keeps passing.
func ScriptHandlers() map[string]ScriptHandler {
	readySleep := func(ctx context.Context, _ io.Reader, stdout, _ io.Writer) (int, error) {
		fmt.Fprintln(stdout, "ready")
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(300 * time.Second):
			return 0, nil
		}
	}
	return map[string]ScriptHandler{
		scriptOutErr: func(_ context.Context, _ io.Reader, stdout, stderr io.Writer) (int, error) {
			fmt.Fprintln(stdout, "out")
			fmt.Fprintln(stderr, "err")
			return 0, nil
		},
		scriptPartial: func(_ context.Context, _ io.Reader, stdout, _ io.Writer) (int, error) {
			fmt.Fprintln(stdout, "partial")
			return 1, nil
		},
		scriptStream: func(_ context.Context, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
			fmt.Fprintln(stdout, "one")
			fmt.Fprintln(stderr, "two")
			_, err := io.Copy(stdout, stdin)
			return 4, err
		},
		scriptReady:       readySleep,
		scriptReadyStatus: readySleep,
	}
}
