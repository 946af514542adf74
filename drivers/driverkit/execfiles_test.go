package driverkit

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// doneProcess is a process that already ended with status 0.
type doneProcess struct{}

func (doneProcess) Wait(context.Context) (*drivers.Result, error) { return &drivers.Result{}, nil }
func (doneProcess) Signal(context.Context, string) error          { return nil }
func (doneProcess) CloseStdin() error                             { return nil }

// A directory the task filled past the listing's bound is refused, not
// read into the host's memory whole.
func TestReadDirBoundsTheListing(t *testing.T) {
	t.Parallel()
	entry := strings.Repeat("n", 200) + "\x0081a4 1\x00\x00"
	f := ExecFiles{Sandbox: "sandbox s", Workdir: "/w", Start: func(_ context.Context, _ drivers.Command, stdout, _ io.Writer) (drivers.Process, error) {
		for written := 0; written <= maxListing; written += len(entry) {
			if _, err := io.WriteString(stdout, entry); err != nil {
				return nil, err
			}
		}
		return doneProcess{}, nil
	}}
	_, err := f.ReadDir(context.Background(), ".")
	if errcode.Code(err) != errcode.Invalid || !strings.Contains(errcode.MessageOf(err), "more than 16 MiB") {
		t.Fatalf("ReadDir of a listing past the bound: %v, want an invalid error saying so", err)
	}
}
