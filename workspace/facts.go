package workspace

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// entry is one entry of a tree as the tree hash sees it (see the package
// doc): its six fields.
type entry struct {
	path, typ, perm, size, digest, target string
}

// sameContent reports whether e and o are the same entry but for the path.
func (e entry) sameContent(o entry) bool {
	return e.typ == o.typ && e.perm == o.perm && e.size == o.size && e.digest == o.digest && e.target == o.target
}

// manifest is a tree's entries sorted by path: the stream the tree hash
// hashes, and what Collect compares with the checkpoint's.
type manifest []entry

// stream returns the bytes the tree hash is the SHA-256 of.
func (m manifest) stream() []byte {
	var b bytes.Buffer
	for _, e := range m {
		for _, f := range []string{e.path, e.typ, e.perm, e.size, e.digest, e.target} {
			b.WriteString(f)
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

// hashStream returns the tree hash of a stream.
func hashStream(s []byte) string {
	sum := sha256.Sum256(s)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// parseStream reads a stream back (the base manifest a prepare left in
// the sandbox, checked against the checkpoint before it is read).
func parseStream(s []byte) (manifest, error) {
	if len(s) == 0 {
		return manifest{}, nil
	}
	if s[len(s)-1] != 0 {
		return nil, fmt.Errorf("the manifest does not end with a NUL")
	}
	f := strings.Split(string(s[:len(s)-1]), "\x00")
	if len(f)%6 != 0 {
		return nil, fmt.Errorf("the manifest has %d fields, not a multiple of 6", len(f))
	}
	m := make(manifest, 0, len(f)/6)
	for i := 0; i < len(f); i += 6 {
		m = append(m, entry{f[i], f[i+1], f[i+2], f[i+3], f[i+4], f[i+5]})
	}
	return m, nil
}

// parseFacts reads the output of wsscript.Facts into a sorted manifest.
func parseFacts(out []byte) (manifest, error) {
	lines := strings.Split(string(out), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	bad := func(f string, a ...any) (manifest, error) {
		return nil, fmt.Errorf("the tree facts the sandbox printed: "+f, a...)
	}
	i := 0
	expect := func(mark string) bool {
		if i < len(lines) && lines[i] == mark {
			i++
			return true
		}
		return false
	}
	if !expect("S") {
		return bad("no S section")
	}
	byPath := map[string]*entry{}
	var m manifest
	for ; i < len(lines) && lines[i] != "H"; i++ {
		f := strings.SplitN(lines[i], " ", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "./") {
			return bad("unreadable stat line %q", lines[i])
		}
		raw, err1 := strconv.ParseUint(f[0], 16, 32)
		size, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return bad("unreadable stat line %q", lines[i])
		}
		e := entry{path: f[2][2:], perm: strconv.FormatUint(raw&0o7777, 8), size: "0"}
		switch raw & 0o170000 {
		case 0o100000:
			e.typ, e.size = "f", strconv.FormatInt(size, 10)
		case 0o040000:
			e.typ = "d"
		case 0o120000:
			e.typ, e.perm = "l", "0"
		case 0o010000:
			e.typ = "p"
		case 0o140000:
			e.typ = "s"
		case 0o020000:
			e.typ = "c"
		case 0o060000:
			e.typ = "b"
		default:
			return bad("an entry of unknown type %o: %q", raw, e.path)
		}
		if e.path == "" || byPath[e.path] != nil {
			return bad("the entry %q twice or empty", e.path)
		}
		m = append(m, e)
		byPath[e.path] = &m[len(m)-1]
	}
	// m no longer grows: the pointers stay valid.
	byPath = make(map[string]*entry, len(m))
	for k := range m {
		byPath[m[k].path] = &m[k]
	}
	if !expect("H") {
		return bad("no H section")
	}
	for ; i < len(lines) && lines[i] != "L"; i++ {
		l := lines[i]
		escaped := strings.HasPrefix(l, "\\")
		l = strings.TrimPrefix(l, "\\")
		if len(l) < 68 || l[64:68] != "  ./" {
			return bad("unreadable digest line %q", lines[i])
		}
		p := l[68:]
		if escaped { // GNU sha256sum escapes a backslash in a name
			p = strings.ReplaceAll(p, `\\`, `\`)
		}
		e := byPath[p]
		if e == nil || e.typ != "f" {
			return bad("a digest of %q, which is no regular file", p)
		}
		e.digest = l[:64]
	}
	if !expect("L") {
		return bad("no L section")
	}
	for i < len(lines) && lines[i] != "E" {
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i], "./") {
			return bad("unreadable link lines at %q", lines[i])
		}
		e := byPath[lines[i][2:]]
		if e == nil || e.typ != "l" {
			return bad("a link target of %q, which is no link", lines[i])
		}
		e.target = lines[i+1]
		i += 2
	}
	if !expect("E") || i != len(lines) {
		return bad("no end mark")
	}
	for _, e := range m {
		if e.typ == "f" && e.digest == "" {
			return bad("no digest of %q", e.path)
		}
	}
	slices.SortFunc(m, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return m, nil
}

// manifestOfArchive returns the manifest of the tree a tar stream holds
// (what tarsafe.Create wrote): regular files, directories and symbolic
// links; anything else is an error.
func manifestOfArchive(r io.Reader) (manifest, error) {
	tr := tar.NewReader(r)
	var m manifest
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		p := strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "./"), "/")
		if p == "" || p == "." {
			continue
		}
		e := entry{path: p, perm: strconv.FormatInt(hdr.Mode&0o7777, 8), size: "0"}
		switch hdr.Typeflag {
		case tar.TypeReg:
			h := sha256.New()
			n, err := io.Copy(h, tr)
			if err != nil {
				return nil, err
			}
			e.typ, e.size, e.digest = "f", strconv.FormatInt(n, 10), hex.EncodeToString(h.Sum(nil))
		case tar.TypeDir:
			e.typ = "d"
		case tar.TypeSymlink:
			e.typ, e.perm, e.target = "l", "0", hdr.Linkname
		default:
			return nil, fmt.Errorf("the entry %q of type %q", hdr.Name, string(hdr.Typeflag))
		}
		m = append(m, e)
	}
	slices.SortFunc(m, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return m, nil
}
