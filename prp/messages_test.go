package prp

import (
	"strings"
	"testing"
)

func validCommand() Command {
	return SealCommand(Command{ID: "c1", Kind: CommandTaskStart, Lease: "lease-1", Run: "run-1",
		TaskStart: &TaskStart{TaskID: "t1", Argv: []string{"sh", "-c", "echo hi"}, Env: map[string]string{"B": "2", "A": "1"}}})
}

// PRP-4: the digest depends on the body, not on map order or the digest field.
func TestCommandDigest(t *testing.T) {
	t.Parallel()
	c := validCommand()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	again := validCommand()
	again.TaskStart.Env = map[string]string{"A": "1", "B": "2"}
	if commandDigest(again) != c.Digest {
		t.Error("the same command body has another digest")
	}
	changed := validCommand()
	changed.TaskStart.Argv = []string{"sh", "-c", "echo bye"}
	if commandDigest(changed) == c.Digest {
		t.Error("a changed argv keeps the digest")
	}
	changed.Digest = c.Digest
	if err := changed.Validate(); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("Validate with a stale digest = %v, want an error naming digest", err)
	}
}

func TestCommandValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*Command)
		field string
	}{
		{"bad id", func(c *Command) { c.ID = "" }, "id"},
		{"bad lease", func(c *Command) { c.Lease = "a b" }, "lease"},
		{"unknown kind", func(c *Command) { c.Kind = "rm" }, "kind"},
		{"empty argv", func(c *Command) { c.TaskStart.Argv = nil }, "argv"},
		{"two payloads", func(c *Command) { c.TaskStop = &TaskStop{TaskID: "t1"} }, "only payload"},
		{"stop without payload", func(c *Command) { c.Kind = CommandTaskStop }, "task_stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validCommand()
			tc.edit(&c)
			c = SealCommand(c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate = %v, want an error naming %q", err, tc.field)
			}
		})
	}
}

func TestEventValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ev   Event
		ok   bool
	}{
		{"output", Event{Kind: EventOutput, TaskID: "t1", Output: &Output{Stream: Stderr}}, true},
		{"output of an unknown stream", Event{Kind: EventOutput, TaskID: "t1", Output: &Output{Stream: "fd3"}}, false},
		{"exit without payload", Event{Kind: EventExit, TaskID: "t1"}, false},
		{"result with an extra exit", Event{Kind: EventResult, Result: &Result{}, Exit: &Exit{}}, false},
		{"started", Event{Kind: EventStarted, TaskID: "t1", PID: 9}, true},
		{"proof without task", Event{Kind: EventProof, Proof: &StopProof{}}, false},
	} {
		if err := tc.ev.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"a": true, "s_1": true, "A.b:c-d_e9": true, strings.Repeat("x", 128): true,
		"": false, "_a": false, ".a": false, "-a": false, ":a": false, "a/b": false, "a b": false,
		"a\n": false, "é": false, strings.Repeat("x", 129): false,
	} {
		if got := ValidID(s); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", s, got, want)
		}
	}
}
