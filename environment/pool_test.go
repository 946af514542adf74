package environment_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// The pool setting (issue 31) is validated by the catalog: sizes in
// 1..64, a sandbox driver that resumes, lists and destroys by id;
// an update that changes it is a knob change, and size 0 removes it.
func TestCatalogPoolSetting(t *testing.T) {
	ctx := context.Background()
	reg := drivers.NewRegistry(fake.New(nil), &testDriverNoPool{testDriver{name: "remote", schema: remoteSchema("remote")}})
	cat := environment.NewCatalog(environment.NewMemoryStore(), reg, environment.NewMemorySecretStore(), nil, &environment.Options{TestMode: true})
	req := environment.CreateRequest{Name: "pooled", Driver: "fake", Pool: &environment.Pool{Size: 2, MaxAge: time.Hour}}
	v, err := cat.Create(ctx, admin, req)
	if err != nil {
		t.Fatal(err)
	}
	if v.Pool == nil || *v.Pool != *req.Pool {
		t.Fatalf("created view pool %+v, want %+v", v.Pool, req.Pool)
	}
	for _, bad := range []struct {
		name string
		pool environment.Pool
		want string
	}{
		{"size 0", environment.Pool{Size: 0, MaxAge: time.Hour}, "size 0 is outside"},
		{"too big", environment.Pool{Size: 65}, "is outside"},
		{"negative age", environment.Pool{Size: 1, MaxAge: -time.Second}, "maxAge"},
	} {
		_, err := cat.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: v.Revision, Pool: &bad.pool})
		wantErr(t, err, errcode.ErrInvalid)
		wantText(t, err, `field "pool"`, bad.want)
	}
	// A driver that cannot destroy or list by id has no pool.
	_, err = cat.Create(ctx, admin, environment.CreateRequest{Name: "r", Driver: "remote",
		Config: map[string]any{"host": "h", "apiKey": canary}, Pool: &environment.Pool{Size: 1}})
	wantErr(t, err, errcode.ErrInvalid)
	wantText(t, err, `field "pool"`, "lacks capability")
	if !errors.Is(err, errcode.ErrInvalid) {
		t.Fatal(err)
	}
	upd, err := cat.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: v.Revision, Pool: &environment.Pool{Size: 5, Runner: true}})
	if err != nil {
		t.Fatal(err)
	}
	if upd.Pool == nil || upd.Pool.Size != 5 || !upd.Pool.Runner || upd.Revision != v.Revision+1 {
		t.Fatalf("after update: %+v revision %d", upd.Pool, upd.Revision)
	}
	gone, err := cat.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: upd.Revision, Pool: &environment.Pool{}})
	if err != nil || gone.Pool != nil {
		t.Fatalf("removing the pool: %+v, %v", gone, err)
	}
	// The JSON form: a duration string, strict members.
	r, err := environment.DecodeUpdateRequest([]byte(`{"baseRevision": 3, "pool": {"size": 2, "maxAge": "90m"}}`))
	if err != nil || r.Pool == nil || r.Pool.MaxAge != 90*time.Minute || r.Pool.Size != 2 {
		t.Fatalf("decode: %+v, %v", r.Pool, err)
	}
	if _, err := environment.DecodeUpdateRequest([]byte(`{"baseRevision": 3, "pool": {"size": 2, "maxage": "90m"}}`)); err == nil {
		t.Fatal("an unknown pool member was accepted")
	}
	b, _ := json.Marshal(environment.Pool{Size: 1, MaxAge: time.Minute})
	if string(b) != `{"size":1,"maxAge":"1m0s"}` {
		t.Fatalf("pool JSON %s", b)
	}
}

// testDriverNoPool is the remote test driver: no resume, list or destroy.
type testDriverNoPool struct{ testDriver }
