package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/prp"
)

// placeSecrets hands a task its secret values (PRP "secrets in commands"):
// it returns the "NAME=value" entries of the uses that go to env vars and
// writes the ones that go to files (mode 0600, parent directories created
// 0700), returning their paths for removeSecretFiles. values are in the
// order of ts.Secrets. Errors name the use (env name or path), never a
// value; on an error no file is left.
func placeSecrets(ts *prp.TaskStart, values []string) (env, files []string, err error) {
	for i, u := range ts.Secrets {
		v := values[i]
		if u.Env != "" {
			if strings.IndexByte(v, 0) >= 0 {
				removeSecretFiles(files)
				return nil, nil, fmt.Errorf("secret %s for env %s holds a NUL byte, which an environment variable cannot", u.Ref, u.Env)
			}
			env = append(env, u.Env+"="+v)
			continue
		}
		path := u.File
		if !filepath.IsAbs(path) {
			base := ts.Cwd
			if base == "" {
				if base, err = os.Getwd(); err != nil {
					removeSecretFiles(files)
					return nil, nil, fmt.Errorf("secret %s for file %s: %w", u.Ref, u.File, err)
				}
			}
			path = filepath.Join(base, path)
		}
		if err := writeSecretFile(path, v); err != nil {
			removeSecretFiles(files)
			return nil, nil, fmt.Errorf("secret %s for file %s: %w", u.Ref, u.File, err)
		}
		files = append(files, path)
	}
	return env, files, nil
}

// writeSecretFile writes v to path with mode 0600, replacing a regular
// file there but never following a symlink at path.
func writeSecretFile(path, v string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	// An existing file keeps its mode on open: set it.
	err = errors.Join(f.Chmod(0o600), writeAll(f, v), f.Sync())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

func writeAll(f *os.File, v string) error {
	_, err := f.WriteString(v)
	return err
}

// removeSecretFiles removes the files placeSecrets wrote, once the task
// ended (or did not start).
func removeSecretFiles(files []string) {
	for _, f := range files {
		_ = os.Remove(f)
	}
}
