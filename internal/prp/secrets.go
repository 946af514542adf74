package prp

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// SecretSource says where the controller finds the value of a SecretUse.
type SecretSource string

// The secret sources.
const (
	// SecretFromEnvironment: Ref is a key of the secret env map (the
	// config.KindSecretMap field, such as docker's and daytona's
	// config.env) of the environment the session's lease was made from.
	SecretFromEnvironment SecretSource = "environment"
	// SecretFromManagedAccount: Ref is a managed-account reference (a
	// secret reference "secret:ID@vN" in the host's secret store), handed
	// over only while a project auth check matches exactly (AUTH-2).
	SecretFromManagedAccount SecretSource = "managed_account"
)

// SecretUse is a reference to one secret value a task needs (PRP "secrets
// in commands"): where the value comes from and where the task gets it,
// as the environment variable Env or the file File (written with mode
// 0600 before the task starts, removed when it ends; a relative path is
// relative to the task's cwd). Exactly one of Env and File is set. A
// command carries only these references; the values travel in a separate
// secrets frame that is delivered once, right before the command, and
// is never journaled, digested, stored or echoed in events.
type SecretUse struct {
	Source SecretSource `json:"source"`
	Ref    string       `json:"ref"`
	Env    string       `json:"env,omitempty"`
	File   string       `json:"file,omitempty"`
	// Projects are the project ids of the run the managed account is
	// handed to; dispatch compares them, sorted, with the project auth
	// check's (AUTH-2). Only for SecretFromManagedAccount.
	Projects []string `json:"projects,omitempty"`
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Validate checks one use: a known source, a reference of at most 256
// printable characters, exactly one of a valid env name (not a BERTH_
// name: those are the runner's) and a clean file path, and projects only
// for a managed account.
func (u *SecretUse) Validate() error {
	switch u.Source {
	case SecretFromEnvironment, SecretFromManagedAccount:
	default:
		return fmt.Errorf("secret use: field source %q is unknown", u.Source)
	}
	if u.Ref == "" || len(u.Ref) > 256 || strings.ContainsFunc(u.Ref, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
		return fmt.Errorf("secret use: field ref %q is empty, too long or not printable", u.Ref)
	}
	switch {
	case (u.Env == "") == (u.File == ""):
		return fmt.Errorf("secret use %s: exactly one of the fields env and file must be set", u.Ref)
	case u.Env != "" && !envNameRE.MatchString(u.Env):
		return fmt.Errorf("secret use %s: field env %q is not an environment variable name", u.Ref, u.Env)
	case u.Env != "" && strings.HasPrefix(u.Env, "BERTH_"):
		return fmt.Errorf("secret use %s: field env %q: BERTH_ names are the runner's", u.Ref, u.Env)
	case u.File != "" && (len(u.File) > 1024 || strings.ContainsRune(u.File, 0) || path.Clean(u.File) != u.File || u.File == "." || u.File == "/" || strings.HasSuffix(u.File, "/")):
		return fmt.Errorf("secret use %s: field file %q is not a clean file path", u.Ref, u.File)
	}
	if u.Source != SecretFromManagedAccount && len(u.Projects) > 0 {
		return fmt.Errorf("secret use %s: field projects is only for a managed account", u.Ref)
	}
	if len(u.Projects) > 256 {
		return fmt.Errorf("secret use %s: field projects has more than 256 entries", u.Ref)
	}
	for _, p := range u.Projects {
		if p == "" || len(p) > 256 {
			return fmt.Errorf("secret use %s: field projects holds an empty or too long id", u.Ref)
		}
	}
	return nil
}
