package drivers

import (
	"context"
	"io"
	"io/fs"
)

// FileInfo is one entry of a directory as Files.ReadDir lists it, read
// without following a symbolic link.
type FileInfo struct {
	// Name is the entry's base name.
	Name string `json:"name"`
	// Mode holds the entry's type bits (fs.ModeDir, fs.ModeSymlink, ...;
	// none for a regular file) and its permission bits.
	Mode fs.FileMode `json:"mode"`
	// Size is a regular file's size in bytes; what the provider reports
	// for other types.
	Size int64 `json:"size"`
	// LinkTarget is a symbolic link's target as it is written, "" for
	// other types.
	LinkTarget string `json:"linkTarget,omitempty"`
}

// Files is an optional interface that may be implemented by a Sandbox
// (capability CapFiles): the sandbox's files as tar streams both ways and
// the listing of one directory. If a Sandbox does not implement it, files
// go in and out only through the image or Exec.
//
// Every path is slash-separated and relative to the sandbox's working
// directory (where Exec runs a command that sets no Dir); "" and "." name
// that directory. An absolute path, or one whose ".." elements leave the
// working directory, is refused with an error wrapping errcode.ErrInvalid
// before anything is read or written. A path that is not there is an
// error wrapping errcode.ErrNotFound.
//
// What a sandbox sends is the task's to forge: unpack an archive of
// GetArchive with tarsafe.Extract, which refuses what would leave the
// destination, and make what goes to PutArchive with tarsafe.Create,
// which leaves credentials out and puts links in as links.
type Files interface {
	// PutArchive extracts the tar stream r under the directory dir,
	// which must exist: an entry "a/b" becomes dir/a/b. It never follows
	// a symbolic link out of dir, wherever the task planted one (the
	// driver extracts inside the sandbox, or refuses); on a host target
	// nothing is written outside the working directory. Existing files of
	// an entry's name are replaced. It reads r to its end or to the first
	// error.
	PutArchive(ctx context.Context, dir string, r io.Reader) error
	// GetArchive writes path to w as a tar stream: a directory as its
	// contents, entries named relative to it ("a.c", "sub/", "sub/b.c"),
	// anything else as one entry named by its base name. A symbolic
	// link at path goes as that link, never its target; on a host
	// target no link leads out of the working directory. It does not
	// close w.
	GetArchive(ctx context.Context, path string, w io.Writer) error
	// ReadDir lists the directory dir, sorted by name, without "." and
	// "..".
	ReadDir(ctx context.Context, dir string) ([]FileInfo, error)
}
