package berth_test

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/lease"
)

// hostProgram is the README's host program (issue 49): an agent acquires
// a sandbox through its scope with a runner, runs a task, streams its
// output, stops it with proof and releases the lease (the zero
// ReleaseOptions: the policy decides, an ephemeral lease is destroyed).
// Example runs it on the fake driver, TestHostProgramOnDocker on Docker.
func hostProgram(ctx context.Context, sys *berth.System, out io.Writer) error {
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	h, err := sys.Leases().Acquire(ctx, agent, lease.AcquireRequest{
		Scope: &authz.Scope{Company: "acme", Workspace: "ws"}, WithRunner: true})
	if err != nil {
		return err
	}
	defer h.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{}) // on every return
	task, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", "echo tests started; sleep 600"}})
	if err != nil {
		return err
	}
	line, err := bufio.NewReader(task.Stream(ctx)).ReadString('\n') // the output, as it comes
	if err != nil {
		return err
	}
	proof, err := task.Stop(ctx) // SIGTERM, then SIGKILL; the runner proves the tree gone
	if err != nil {
		return err
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{}) // the policy decides: destroyed, with proof
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%sstopped: %t, lease %s %s\n", line, proof.Complete, l.Status, l.Cleanup)
	return nil
}
