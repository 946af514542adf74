package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/wsscript"
)

// node is one entry of a sandbox's in-memory file tree (drivers.Files).
type node struct {
	mode fs.FileMode // type and permission bits
	data []byte      // a regular file's content
	link string      // a symbolic link's target
}

var _ drivers.Files = (*sandbox)(nil)

func invalid(id, what string) error {
	return &errcode.Error{Code: errcode.Invalid, Op: "files", Target: fmt.Sprintf("sandbox %q", id),
		Message: fmt.Sprintf("The fake sandbox %s refused %s.", id, what), Err: fmt.Errorf("%s", what)}
}

func notFoundPath(id, p string) error {
	return fmt.Errorf("fake: files %s: %q: %w", id, p, errcode.ErrNotFound)
}

// lookup returns the node of p in b's tree ("." is the working
// directory), or an error when p is missing or lies under a link: the
// fake never follows one.
func (s *sandbox) lookup(b *box, p string) (*node, error) {
	if p == "." {
		return &node{mode: fs.ModeDir | 0o755}, nil
	}
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if n := b.files[d]; n != nil && n.mode&fs.ModeSymlink != 0 {
			return nil, invalid(s.id, fmt.Sprintf("the path %q, which lies under the symbolic link %q", p, d))
		}
	}
	n := b.files[p]
	if n == nil {
		return nil, notFoundPath(s.id, p)
	}
	return n, nil
}

// maxPrealloc bounds the buffer PutArchive allocates ahead for one
// archive entry, whatever size its header claims.
const maxPrealloc = 256 << 20

// PutArchive extracts r into the in-memory tree under dir.
func (s *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	dir, err := driverkit.FilePath(s.id, dir)
	if err != nil {
		return err
	}
	if _, _, err := s.begin(ctx, opFiles); err != nil {
		return err
	}
	// Read the archive before taking the lock.
	type entry struct {
		hdr  *tar.Header
		data []byte
	}
	var entries []entry
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return invalid(s.id, "an archive it could not read: "+err.Error())
		}
		// Read into a buffer of the entry's size (bounded: the header is
		// the archive's word), not through io.ReadAll's doublings: a
		// large file (the conformance suite moves 64 MiB) was copied
		// twice over on its way in.
		var data bytes.Buffer
		data.Grow(int(min(max(hdr.Size, 0), maxPrealloc)) + bytes.MinRead)
		if _, err := data.ReadFrom(tr); err != nil {
			return err
		}
		entries = append(entries, entry{hdr, data.Bytes()})
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	b, ok := s.d.boxes[s.id]
	if !ok {
		return notFoundPath(s.id, dir)
	}
	if n, err := s.lookup(b, dir); err != nil {
		return err
	} else if !n.mode.IsDir() {
		return invalid(s.id, fmt.Sprintf("to extract into %q, which is no directory", dir))
	}
	if b.files == nil {
		b.files = map[string]*node{}
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.hdr.Name, "/")
		if name == "" || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
			return invalid(s.id, fmt.Sprintf("the archive entry %q, outside the directory", e.hdr.Name))
		}
		p := path.Join(dir, name)
		if p == dir {
			continue
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			switch n := b.files[d]; {
			case n == nil:
				b.files[d] = &node{mode: fs.ModeDir | 0o755}
			case !n.mode.IsDir():
				return invalid(s.id, fmt.Sprintf("the archive entry %q, which lies under %q, no directory", e.hdr.Name, d))
			}
		}
		perm := fs.FileMode(e.hdr.Mode) & fs.ModePerm
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			b.files[p] = &node{mode: fs.ModeDir | perm}
		case tar.TypeReg:
			b.files[p] = &node{mode: perm, data: e.data}
		case tar.TypeSymlink:
			b.files[p] = &node{mode: fs.ModeSymlink | 0o777, link: e.hdr.Linkname}
		case tar.TypeLink:
			t := b.files[path.Join(dir, e.hdr.Linkname)]
			if t == nil || !t.mode.IsRegular() {
				return invalid(s.id, fmt.Sprintf("the hard link %q to %q, no regular file", e.hdr.Name, e.hdr.Linkname))
			}
			b.files[p] = t
		default:
			return invalid(s.id, fmt.Sprintf("the archive entry %q of type %q", e.hdr.Name, e.hdr.Typeflag))
		}
	}
	return nil
}

// GetArchive writes p from the in-memory tree.
func (s *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	p, err := driverkit.FilePath(s.id, p)
	if err != nil {
		return err
	}
	if _, _, err := s.begin(ctx, opFiles); err != nil {
		return err
	}
	// The entries are gathered under the lock and written after it,
	// straight to w: a node's data is never changed in place (a write
	// makes a new node), and the archive is not held in memory whole.
	type entry struct {
		name string
		n    *node
	}
	var entries []entry
	s.d.mu.Lock()
	err = func() error {
		b, ok := s.d.boxes[s.id]
		if !ok {
			return notFoundPath(s.id, p)
		}
		n, err := s.lookup(b, p)
		if err != nil {
			return err
		}
		if !n.mode.IsDir() {
			entries = append(entries, entry{path.Base(p), n})
			return nil
		}
		prefix := p + "/"
		for _, k := range slices.Sorted(maps.Keys(b.files)) {
			if p == "." {
				entries = append(entries, entry{k, b.files[k]})
			} else if rel, ok := strings.CutPrefix(k, prefix); ok {
				entries = append(entries, entry{rel, b.files[k]})
			}
		}
		return nil
	}()
	s.d.mu.Unlock()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		name, n := e.name, e.n
		hdr := &tar.Header{Name: name, Mode: int64(n.mode & fs.ModePerm)}
		switch {
		case n.mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case n.mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, n.link
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(n.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(n.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// ReadDir lists dir of the in-memory tree.
func (s *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	dir, err := driverkit.FilePath(s.id, dir)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.begin(ctx, opFiles); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	b, ok := s.d.boxes[s.id]
	if !ok {
		return nil, notFoundPath(s.id, dir)
	}
	if n, err := s.lookup(b, dir); err != nil {
		return nil, err
	} else if !n.mode.IsDir() {
		return nil, invalid(s.id, fmt.Sprintf("to list %q, which is no directory", dir))
	}
	out := []drivers.FileInfo{}
	for k, n := range b.files {
		if path.Dir(k) == dir {
			out = append(out, drivers.FileInfo{Name: path.Base(k), Mode: n.mode, Size: int64(len(n.data)), LinkTarget: n.link})
		}
	}
	slices.SortFunc(out, func(a, b drivers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ln makes a symbolic link in the sandbox's tree: ln -s TARGET NAME, NAME
// relative to the working directory.
func (d *Driver) ln(_ context.Context, inv Invocation, args []string) (int, error) {
	if len(args) != 3 || args[0] != "-s" {
		fmt.Fprintln(inv.Stderr, "fake: ln: only ln -s TARGET NAME")
		return 1, nil
	}
	name, err := driverkit.FilePath(inv.SandboxID, args[2])
	if err != nil || name == "." {
		fmt.Fprintf(inv.Stderr, "ln: %s: want a path under the working directory\n", args[2])
		return 1, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.boxes[inv.SandboxID]
	if !ok {
		return 1, nil
	}
	if b.files == nil {
		b.files = map[string]*node{}
	}
	if b.files[name] != nil {
		fmt.Fprintf(inv.Stderr, "ln: %s: File exists\n", name)
		return 1, nil
	}
	b.files[name] = &node{mode: fs.ModeSymlink | 0o777, link: args[1]}
	return 0, nil
}

// wsFacts answers wsscript.Facts for the tree under dir, as find, stat,
// sha256sum and readlink in a sandbox print it.
func (d *Driver) wsFacts(inv Invocation, dir string) (int, error) {
	dir, err := driverkit.FilePath(inv.SandboxID, dir)
	if err != nil {
		return wsscript.ExitNotFound, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.boxes[inv.SandboxID]
	if !ok {
		return 1, nil
	}
	if n := b.files[dir]; dir != "." && (n == nil || !n.mode.IsDir()) {
		return wsscript.ExitNotFound, nil
	}
	prefix := dir + "/"
	if dir == "." {
		prefix = ""
	}
	var names []string
	for k := range b.files {
		if strings.HasPrefix(k, prefix) && k != dir {
			if strings.Contains(k, "\n") {
				return wsscript.ExitNewline, nil
			}
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var st, sums, links strings.Builder
	for _, k := range names {
		n, rel := b.files[k], "./"+strings.TrimPrefix(k, prefix)
		raw := uint32(n.mode.Perm())
		switch {
		case n.mode.IsDir():
			raw |= 0o040000
		case n.mode&fs.ModeSymlink != 0:
			raw |= 0o120000
			fmt.Fprintf(&links, "%s\n%s\n", rel, n.link)
		default:
			raw |= 0o100000
			fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(n.data), rel)
		}
		fmt.Fprintf(&st, "%x %d %s\n", raw, len(n.data), rel)
	}
	fmt.Fprintf(inv.Stdout, "S\n%sH\n%sL\n%sE\n", st.String(), sums.String(), links.String())
	return 0, nil
}

// wsRemove answers wsscript.Remove: dir and everything under it go.
func (d *Driver) wsRemove(inv Invocation, dir string) (int, error) {
	dir, err := driverkit.FilePath(inv.SandboxID, dir)
	if err != nil || dir == "." {
		return 1, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.boxes[inv.SandboxID]
	if !ok {
		return 1, nil
	}
	for _, p := range []string{".berth", ".berth/ws", dir} {
		if n := b.files[p]; n != nil && n.mode&fs.ModeSymlink != 0 {
			return wsscript.ExitLink, nil
		}
	}
	for k := range b.files {
		if k == dir || strings.HasPrefix(k, dir+"/") {
			delete(b.files, k)
		}
	}
	return 0, nil
}

// taskDir is the fake runner's runner.Options.TaskDir: a task whose
// working directory is the sandbox's (cwd "" or under /root) runs in a
// fresh host directory that holds a copy of the sandbox's tree, and what
// the task changed there goes back into the tree once its leader exited
// (an entry the task did not change keeps what Files wrote meanwhile).
// Any other cwd is a directory of this host, as the task is a process of
// this host: it runs there and no files go back.
func (s *sandbox) taskDir(cwd string) (string, func(), error) {
	rel, under := ".", cwd == "" || cwd == defaultDir
	if r, ok := strings.CutPrefix(cwd, defaultDir+"/"); ok {
		rel, under = path.Clean(r), true
	}
	if !under {
		return cwd, func() {}, nil
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", nil, fmt.Errorf("the working directory %q leaves the sandbox's", cwd)
	}
	s.d.mu.Lock()
	b, ok := s.d.boxes[s.id]
	var before map[string]*node
	if ok {
		before = maps.Clone(b.files) // nodes are replaced, never changed in place
	}
	s.d.mu.Unlock()
	if !ok {
		return "", nil, notFoundPath(s.id, cwd)
	}
	host, err := os.MkdirTemp("", "berth-fake-task-")
	if err != nil {
		return "", nil, err
	}
	if err := writeTree(host, before); err != nil {
		os.RemoveAll(host)
		return "", nil, fmt.Errorf("the copy of the sandbox's files: %w", err)
	}
	if n := before[rel]; rel != "." && (n == nil || !n.mode.IsDir()) {
		os.RemoveAll(host)
		return "", nil, fmt.Errorf("chdir %s: %w", cwd, fs.ErrNotExist)
	}
	done := func() {
		defer os.RemoveAll(host)
		after, err := readTree(host)
		if err != nil {
			return // the sandbox keeps its tree: the task's changes are lost, as in a sandbox that broke
		}
		s.d.mu.Lock()
		defer s.d.mu.Unlock()
		b, ok := s.d.boxes[s.id]
		if !ok {
			return
		}
		if b.files == nil {
			b.files = map[string]*node{}
		}
		for k, n := range after {
			if !sameNode(before[k], n) {
				b.files[k] = n
			}
		}
		for k := range before {
			if after[k] == nil {
				delete(b.files, k)
			}
		}
	}
	return filepath.Join(host, filepath.FromSlash(rel)), done, nil
}

// writeTree writes the tree t (relative paths) under the host directory
// dir: parents before children, modes set after the content. It writes
// through an os.Root, so an entry can never land outside dir through a
// link the sandbox's tree holds (the tree is the task's to shape).
func writeTree(dir string, t map[string]*node) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	keys := slices.Sorted(maps.Keys(t))
	for _, k := range keys {
		n := t[k]
		switch {
		case n.mode.IsDir():
			err = root.Mkdir(k, 0o700)
		case n.mode&fs.ModeSymlink != 0:
			err = root.Symlink(n.link, k)
		default:
			err = root.WriteFile(k, n.data, 0o600)
		}
		if err != nil {
			return err
		}
	}
	for _, k := range keys { // directories' modes last, in case one is read-only
		if n := t[k]; n.mode&fs.ModeSymlink == 0 {
			if err := root.Chmod(k, n.mode&fs.ModePerm); err != nil {
				return err
			}
		}
	}
	return nil
}

// readTree reads the host directory dir into a tree; it follows no link.
func readTree(dir string) (map[string]*node, error) {
	t := map[string]*node{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		n := &node{mode: info.Mode() & (fs.ModeType | fs.ModePerm)} // permission bits only, as PutArchive keeps
		switch {
		case info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if n.link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if n.data, err = os.ReadFile(p); err != nil {
				return err
			}
		default:
			return nil // a fifo or socket the task made: the fake's tree holds none
		}
		t[filepath.ToSlash(rel)] = n
		return nil
	})
	return t, err
}

// sameNode reports whether a and b are the same entry (nil for none).
func sameNode(a, b *node) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.mode == b.mode && a.link == b.link && bytes.Equal(a.data, b.data)
}
