package workspace

import (
	"path"
	"strings"
	"testing"
)

// Each owner's key has a directory of its own, under the workdir.
func TestDirFor(t *testing.T) {
	seen := map[string]string{}
	for _, o := range [][3]string{
		{"acme", "app", "k"}, {"globex", "app", "k"}, {"acme", "web", "k"}, {"acme", "", "k"},
		{"acme", "app", "k2"}, {"acme\x00app", "", "k"}, {"acme", "app\x00k", ""},
	} {
		d := dirFor("/work", o[0], o[1], o[2])
		if !strings.HasPrefix(d, "/work/.berth/ws/") || path.Clean(d) != d || path.Dir(d) != "/work/.berth/ws" {
			t.Errorf("dirFor(%q) = %s, not one directory under /work/.berth/ws", o, d)
		}
		if other, ok := seen[d]; ok {
			t.Errorf("owners %q and %s share directory %s", o, other, d)
		}
		seen[d] = strings.Join(o[:], "/")
	}
	if got := dirFor("/work", "acme", "app", "main"); !strings.HasPrefix(got, "/work/.berth/ws/main-") || len(got) != len("/work/.berth/ws/main-")+16 {
		t.Errorf("dirFor = %s, want /work/.berth/ws/main-<16 hex digits>", got)
	}
}
