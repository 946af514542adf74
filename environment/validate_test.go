package environment_test

import (
	"testing"

	"github.com/berthdev/berth/environment"
)

// TestLooksLikeSecretName (CFG-3): env var names that look like credentials
// are recognised (and so refused by the catalog); ordinary names are not.
func TestLooksLikeSecretName(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"GITHUB_TOKEN": true, "githubToken": true, "NPM_TOKENS": true, "AWS_SECRET_ACCESS_KEY": true,
		"AWS_ACCESS_KEY_ID": true, "DB_PASSWORD": true, "MYSQL_PASSWD": true, "OPENAI_API_KEY": true,
		"apikey": true, "SSH_PRIVATE_KEY": true, "GOOGLE_APPLICATION_CREDENTIALS": true, "client-secret": true,
		"PATH": false, "HOME": false, "PWD": false, "SSH_AUTH_SOCK": false, "TOKENIZERS_PARALLELISM": false,
		"KEYBOARD_LAYOUT": false, "PRIMARY_KEY_COLUMN": false, "GOFLAGS": false, "LANG": false,
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := environment.LooksLikeSecretName(name); got != want {
				t.Errorf("LooksLikeSecretName(%q) = %v, want %v", name, got, want)
			}
		})
	}
}
