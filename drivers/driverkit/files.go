package driverkit

import (
	"fmt"
	"path"
	"strings"

	"github.com/berthdev/berth/errcode"
)

// FilePath checks a path given to drivers.Files and returns it cleaned,
// relative to the sandbox's working directory ("." for the directory
// itself), or an error wrapping errcode.ErrInvalid when it is absolute or
// its ".." elements leave the working directory. sandbox names the
// sandbox in the error.
func FilePath(sandbox, p string) (string, error) {
	c := path.Clean("./" + p)
	if strings.HasPrefix(p, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(p, 0) {
		return "", &errcode.Error{Code: errcode.Invalid, Op: "files", Target: fmt.Sprintf("sandbox %q", sandbox), Field: "path",
			Message: fmt.Sprintf("The path %q is outside the sandbox's working directory: give one relative to it, without leaving it.", p),
			Err:     fmt.Errorf("path %q: want a relative path inside the working directory", p)}
	}
	return c, nil
}
