package execrelay

import (
	"context"
	"fmt"
	"io"

	"github.com/berthdev/berth/drivers"
)

// Command returns the argv that runs the relay of the runner binary at
// runner with its socket at socket: "runner relay --socket socket". It
// holds nothing secret (the relay needs no secret: the controller
// authenticates the runners it carries).
func Command(runner, socket string) []string {
	return []string{runner, "relay", "--socket", socket}
}

// StreamExec returns a StartFunc that runs cmd (its Argv from Command; its
// Stdin is replaced) through se's streaming exec, and returns when the
// process has ended: an error naming its exit status, or why it could not
// start or be waited for. The driver must end the process when the context
// given to Start ends (drivers.Process says so).
func StreamExec(se drivers.StreamExecer, cmd drivers.Command) StartFunc {
	return func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
		c := cmd
		c.Stdin = stdin
		p, err := se.Start(ctx, c, stdout, stderr)
		if err != nil {
			return err
		}
		res, err := p.Wait(ctx)
		if err != nil {
			return err
		}
		return fmt.Errorf("the relay exited with status %d", res.ExitCode)
	}
}
