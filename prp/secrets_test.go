package prp

import (
	"fmt"
	"strings"
	"testing"
)

func TestSecretUsesValidate(t *testing.T) {
	t.Parallel()
	env := SecretUse{Source: SecretFromEnvironment, Ref: "TOKEN", Env: "TOKEN"}
	acct := SecretUse{Source: SecretFromManagedAccount, Ref: "secret:a@v1", File: ".config/acct.json", Projects: []string{"p1"}}
	ok := SealCommand(Command{ID: "c1", Kind: CommandTaskStart, Lease: "l", Run: "r",
		TaskStart: &TaskStart{TaskID: "t1", Argv: []string{"true"}, Secrets: []SecretUse{env, acct}}})
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid command: %v", err)
	}
	for _, tc := range []struct {
		name, field string
		uses        []SecretUse
	}{
		{"unknown source", "source", []SecretUse{{Source: "x", Ref: "a", Env: "A"}}},
		{"no target", "exactly one", []SecretUse{{Source: SecretFromEnvironment, Ref: "a"}}},
		{"two targets", "exactly one", []SecretUse{{Source: SecretFromEnvironment, Ref: "a", Env: "A", File: "f"}}},
		{"bad env name", "field env", []SecretUse{{Source: SecretFromEnvironment, Ref: "a", Env: "A-B"}}},
		{"runner's env name", "BERTH_", []SecretUse{{Source: SecretFromEnvironment, Ref: "a", Env: "BERTH_TASK_TAG"}}},
		{"unclean file", "field file", []SecretUse{{Source: SecretFromEnvironment, Ref: "a", File: "a/../b"}}},
		{"empty ref", "field ref", []SecretUse{{Source: SecretFromEnvironment, Env: "A"}}},
		{"projects on env", "projects", []SecretUse{{Source: SecretFromEnvironment, Ref: "a", Env: "A", Projects: []string{"p"}}}},
		{"same env twice", "two secrets", []SecretUse{env, env}},
		{"two accounts", "more than one managed account", []SecretUse{acct, {Source: SecretFromManagedAccount, Ref: "secret:b@v1", Env: "B"}}},
		{"too many", "more than", func() []SecretUse {
			var u []SecretUse
			for i := range maxSecretUses + 1 {
				u = append(u, SecretUse{Source: SecretFromEnvironment, Ref: "a", Env: fmt.Sprintf("A%d", i)})
			}
			return u
		}()},
	} {
		c := SealCommand(Command{ID: "c1", Kind: CommandTaskStart, Lease: "l", Run: "r",
			TaskStart: &TaskStart{TaskID: "t1", Argv: []string{"true"}, Secrets: tc.uses}})
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want an error naming %q", tc.name, err, tc.field)
		}
	}
}
