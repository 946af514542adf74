package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
)

// treeHash returns the tree hash (see the package doc) of the files under
// root, reading them through root only: a symbolic link is hashed as its
// target's text and never followed, and a fifo or device is never opened.
// A file that changes type while it is read (a race with a writer) is an
// error, as is any unreadable entry.
func treeHash(root *os.Root) (string, error) {
	type entry struct {
		path string
		mode fs.FileMode
	}
	var entries []entry
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		entries = append(entries, entry{p, d.Type()})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("workspace: tree hash of %s: %w", root.Name(), err)
	}
	slices.SortFunc(entries, func(a, b entry) int {
		switch {
		case a.path < b.path:
			return -1
		case a.path > b.path:
			return 1
		}
		return 0
	})
	sum := sha256.New()
	for _, e := range entries {
		if err := hashEntry(sum, root, e.path); err != nil {
			return "", fmt.Errorf("workspace: tree hash of %s: %s: %w", root.Name(), e.path, err)
		}
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

// hashEntry writes one entry's six fields to sum.
func hashEntry(sum hash.Hash, root *os.Root, p string) error {
	fi, err := root.Lstat(p)
	if err != nil {
		return err
	}
	m := fi.Mode()
	typ, perm, size, digest, target := "", uint32(m.Perm()), int64(0), "", ""
	if m&fs.ModeSetuid != 0 {
		perm |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		perm |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		perm |= 0o1000
	}
	switch {
	case m.IsRegular():
		typ = "f"
		if size, digest, err = hashFile(root, p, fi); err != nil {
			return err
		}
	case m.IsDir():
		typ = "d"
	case m&fs.ModeSymlink != 0:
		typ, perm = "l", 0
		if target, err = root.Readlink(p); err != nil {
			return err
		}
	case m&fs.ModeNamedPipe != 0:
		typ = "p"
	case m&fs.ModeSocket != 0:
		typ = "s"
	case m&fs.ModeCharDevice != 0:
		typ = "c"
	case m&fs.ModeDevice != 0:
		typ = "b"
	default:
		return fmt.Errorf("an entry of unknown type %v", m.Type())
	}
	for _, f := range []string{p, typ, strconv.FormatUint(uint64(perm), 8), strconv.FormatInt(size, 10), digest, target} {
		sum.Write([]byte(f))
		sum.Write([]byte{0})
	}
	return nil
}

// hashFile returns the length and content SHA-256 of the regular file p,
// which must still be the file fi describes once opened.
func hashFile(root *os.Root, p string, fi fs.FileInfo) (int64, string, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|openNoFollow, 0)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	if !opened.Mode().IsRegular() || !os.SameFile(fi, opened) {
		return 0, "", errors.New("the file changed while it was hashed")
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
