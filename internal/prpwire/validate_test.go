package prpwire

import (
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/prp"
)

func validCommand() prp.Command {
	return SealCommand(prp.Command{ID: "c1", Kind: prp.CommandTaskStart, Lease: "lease-1", Run: "run-1",
		TaskStart: &prp.TaskStart{TaskID: "t1", Argv: []string{"sh", "-c", "echo hi"}, Env: map[string]string{"B": "2", "A": "1"}}})
}

// PRP-4: the digest depends on the body, not on map order or the digest field.
func TestCommandDigest(t *testing.T) {
	t.Parallel()
	c := validCommand()
	if err := ValidateCommand(c); err != nil {
		t.Fatal(err)
	}
	again := validCommand()
	again.TaskStart.Env = map[string]string{"A": "1", "B": "2"}
	if SealCommand(again).Digest != c.Digest {
		t.Error("the same command body has another digest")
	}
	changed := validCommand()
	changed.TaskStart.Argv = []string{"sh", "-c", "echo bye"}
	if SealCommand(changed).Digest == c.Digest {
		t.Error("a changed argv keeps the digest")
	}
	changed.Digest = c.Digest
	if err := ValidateCommand(changed); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("Validate with a stale digest = %v, want an error naming digest", err)
	}
}

func TestCommandValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*prp.Command)
		field string
	}{
		{"bad id", func(c *prp.Command) { c.ID = "" }, "id"},
		{"bad lease", func(c *prp.Command) { c.Lease = "a b" }, "lease"},
		{"unknown kind", func(c *prp.Command) { c.Kind = "rm" }, "kind"},
		{"empty argv", func(c *prp.Command) { c.TaskStart.Argv = nil }, "argv"},
		{"two payloads", func(c *prp.Command) { c.TaskStop = &prp.TaskStop{TaskID: "t1"} }, "only payload"},
		{"stop without payload", func(c *prp.Command) { c.Kind = prp.CommandTaskStop }, "task_stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validCommand()
			tc.edit(&c)
			c = SealCommand(c)
			if err := ValidateCommand(c); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate = %v, want an error naming %q", err, tc.field)
			}
		})
	}
}

func TestEventValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ev   prp.Event
		ok   bool
	}{
		{"output", prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stderr}}, true},
		{"output of an unknown stream", prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: "fd3"}}, false},
		{"exit without payload", prp.Event{Kind: prp.EventExit, TaskID: "t1"}, false},
		{"result with an extra exit", prp.Event{Kind: prp.EventResult, Result: &prp.Result{}, Exit: &prp.Exit{}}, false},
		{"started", prp.Event{Kind: prp.EventStarted, TaskID: "t1", PID: 9}, true},
		{"proof without task", prp.Event{Kind: prp.EventProof, Proof: &prp.StopProof{}}, false},
	} {
		if err := ValidateEvent(tc.ev); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestSecretUsesValidate(t *testing.T) {
	t.Parallel()
	env := prp.SecretUse{Source: prp.SecretFromEnvironment, Ref: "TOKEN", Env: "TOKEN"}
	acct := prp.SecretUse{Source: prp.SecretFromManagedAccount, Ref: "secret:a@v1", File: ".config/acct.json", Projects: []string{"p1"}}
	ok := SealCommand(prp.Command{ID: "c1", Kind: prp.CommandTaskStart, Lease: "l", Run: "r",
		TaskStart: &prp.TaskStart{TaskID: "t1", Argv: []string{"true"}, Secrets: []prp.SecretUse{env, acct}}})
	if err := ValidateCommand(ok); err != nil {
		t.Fatalf("valid command: %v", err)
	}
	for _, tc := range []struct {
		name, field string
		uses        []prp.SecretUse
	}{
		{"unknown source", "source", []prp.SecretUse{{Source: "x", Ref: "a", Env: "A"}}},
		{"no target", "exactly one", []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "a"}}},
		{"two targets", "exactly one", []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "a", Env: "A", File: "f"}}},
		{"bad env name", "field env", []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "a", Env: "A-B"}}},
		{"runner's env name", "BERTH_", []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "a", Env: "BERTH_TASK_TAG"}}},
		{"unclean file", "field file", []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "a", File: "a/../b"}}},
		{"empty ref", "field ref", []prp.SecretUse{{Source: prp.SecretFromEnvironment, Env: "A"}}},
		{"projects on env", "projects", []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "a", Env: "A", Projects: []string{"p"}}}},
		{"same env twice", "two secrets", []prp.SecretUse{env, env}},
		{"two accounts", "more than one managed account", []prp.SecretUse{acct, {Source: prp.SecretFromManagedAccount, Ref: "secret:b@v1", Env: "B"}}},
		{"too many", "more than", func() []prp.SecretUse {
			var u []prp.SecretUse
			for i := range MaxSecretUses + 1 {
				u = append(u, prp.SecretUse{Source: prp.SecretFromEnvironment, Ref: "a", Env: fmt.Sprintf("A%d", i)})
			}
			return u
		}()},
	} {
		c := SealCommand(prp.Command{ID: "c1", Kind: prp.CommandTaskStart, Lease: "l", Run: "r",
			TaskStart: &prp.TaskStart{TaskID: "t1", Argv: []string{"true"}, Secrets: tc.uses}})
		if err := ValidateCommand(c); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want an error naming %q", tc.name, err, tc.field)
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
