package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/internal/prp"
)

// placeSecrets hands a task its secret values (PRP "secrets in commands"):
// it returns the "NAME=value" entries of the uses that go to env vars and
// writes the ones that go to files (see writeSecretFile: new files of the
// runner's own, mode 0600, parent directories created 0700, no symlink
// followed), returning their paths for removeSecretFiles. values are in the
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

// writeSecretFile writes v into a new file at path that the runner creates
// itself: exclusive create (O_CREAT|O_EXCL, mode 0600), so that a file or a
// symlink already there (planted by the task or by another user in a
// shared directory) refuses the task rather than receiving the value, and
// no symlink followed in any part of the path (missing parent directories
// are created 0700 on the way). On any error after the create the file is
// removed through its directory's descriptor, so nothing holding the value
// remains. Errors wrap errSecretFile.
func writeSecretFile(path, v string) (err error) {
	dir, base := filepath.Split(filepath.Clean(path))
	if base == "" || base == "." || base == ".." {
		return fmt.Errorf("%w: %s names no file", errSecretFile, path)
	}
	dfd, err := openSecretDir(dir, true)
	if err != nil {
		return fmt.Errorf("%w: directory: %w", errSecretFile, err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: create: %w", errSecretFile, err)
	}
	f := os.NewFile(uintptr(fd), path)
	// The file is the runner's own (it created it): set the mode, since the
	// umask only narrows it, and check what was created.
	var st unix.Stat_t
	err = errors.Join(f.Chmod(0o600), unix.Fstat(fd, &st))
	if err == nil && (st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o7777 != 0o600 || int(st.Uid) != os.Geteuid()) {
		err = errors.New("the created file is not a 0600 regular file of the runner")
	}
	if err == nil {
		err = errors.Join(writeAll(f, v), f.Sync())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, base, 0)
		return fmt.Errorf("%w: %w", errSecretFile, err)
	}
	return nil
}

// errSecretFile marks a secret file the runner could not create safely; the
// task is refused with prpwire.CodeSecretFile.
var errSecretFile = errors.New("secret file refused")

// openSecretDir opens directory dir (absolute, or relative to the working
// directory) without following a symlink in any component, creating the
// missing ones (0700) when create is set. It returns the directory's
// descriptor.
func openSecretDir(dir string, create bool) (int, error) {
	dir = filepath.Clean(dir)
	fd, err := openNoSymlinks(dir)
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, errNoOpenat2), create && errors.Is(err, unix.ENOENT):
	default:
		return -1, err
	}
	// The walk: one component at a time, each opened O_NOFOLLOW relative
	// to the one before.
	start := "."
	if filepath.IsAbs(dir) {
		start = "/"
	}
	fd, err = unix.Open(start, dirFlags, 0)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(dir, string(filepath.Separator)) {
		if name == "" || name == "." {
			continue
		}
		next, err := unix.Openat(fd, name, dirFlags|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, name, 0o700); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, name, dirFlags|unix.O_NOFOLLOW, 0)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", name, err)
		}
		fd = next
	}
	return fd, nil
}

func writeAll(f *os.File, v string) error {
	_, err := f.WriteString(v)
	return err
}

// removeSecretFiles removes the files placeSecrets wrote, once the task
// ended (or did not start), through their directories opened without
// following symlinks (a task may have replaced a directory on the way by a
// symlink meanwhile).
func removeSecretFiles(files []string) {
	for _, f := range files {
		dir, base := filepath.Split(filepath.Clean(f))
		dfd, err := openSecretDir(dir, false)
		if err != nil {
			continue
		}
		_ = unix.Unlinkat(dfd, base, 0)
		unix.Close(dfd)
	}
}
