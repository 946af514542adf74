package prp_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// A host names its tasks and runs with NewID: the prefix, "_" and 32
// random hex digits, always a valid id on the wire.
func ExampleNewID() {
	id, err := prp.NewID("task")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.HasPrefix(id, "task_"), len(id), prpwire.ValidID(id))
	fmt.Println(prpwire.ValidID("task 1"), prpwire.ValidID("-task"))
	// Output:
	// true 37 true
	// false false
}

// A task starts with a TaskStart (embedded in the controller's TaskSpec,
// see internal/controller). A secret the task needs is a SecretUse: a
// reference, never the value, handed to the task as an env var or a file;
// Validate refuses a malformed one before anything is sent.
func ExampleSecretUse_Validate() {
	start := prp.TaskStart{
		TaskID: "task_1",
		Argv:   []string{"gh", "pr", "list"},
		Secrets: []prp.SecretUse{
			// GITHUB_TOKEN of the lease environment's secret env map.
			{Source: prp.SecretFromEnvironment, Ref: "GITHUB_TOKEN", Env: "GH_TOKEN"},
			// A managed account, as a file, for the run's projects.
			{Source: prp.SecretFromManagedAccount, Ref: "claude-main", File: ".config/claude/credentials.json", Projects: []string{"web"}},
		},
	}
	for _, u := range start.Secrets {
		fmt.Println(u.Ref, u.Validate())
	}

	bad := prp.SecretUse{Source: prp.SecretFromEnvironment, Ref: "GITHUB_TOKEN", Env: "GH_TOKEN", File: "token"}
	fmt.Println(bad.Validate())
	// Output:
	// GITHUB_TOKEN <nil>
	// claude-main <nil>
	// secret use GITHUB_TOKEN: exactly one of the fields env and file must be set
}

// A ticket lets one runner in once: the host hands its text to the runner
// and stores only its hash. ParseTicket reads the text back (a trailing
// newline from a file is ignored) and never quotes bad input.
func ExampleParseTicket() {
	t, err := prp.NewTicket()
	if err != nil {
		fmt.Println(err)
		return
	}
	back, err := prp.ParseTicket(t.String() + "\n")
	fmt.Println(back.Hash() == t.Hash(), err)

	_, err = prp.ParseTicket("not-a-ticket")
	fmt.Println(errors.Is(err, prp.ErrTicketMalformed), err)
	// Output:
	// true <nil>
	// true prp: ticket malformed: want 49 characters starting with "prpt1_"
}
