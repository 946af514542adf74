package environment_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/daytonafake"
)

// Issue 53 item 3: ListImages asks the provider of a saved environment
// (with its stored key) or of an unsaved config (the key pasted, the
// snapshot not chosen yet) for its images; a board member is refused; a
// wrong key fails without the key in the text; a driver that lists none is
// unsupported; a request that names nothing is invalid.
func TestListImagesOfSavedAndDraftConfigs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	snap, err := srv.CreateSnapshot("tools-1.0", "debian:12")
	if err != nil {
		t.Fatal(err)
	}
	reg := drivers.NewRegistry(daytona.New(nil), fake.New(nil))
	cat := environment.NewCatalog(environment.NewMemoryStore(), reg, environment.NewMemorySecretStore(), nil, &environment.Options{TestMode: true})
	v, err := cat.Create(ctx, admin, environment.CreateRequest{Name: "cloud", Driver: "daytona",
		Config: map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey(), "snapshot_id": snap.ID}})
	if err != nil {
		t.Fatal(err)
	}
	has := func(what string, got []drivers.ImageChoice, err error) {
		t.Helper()
		for _, c := range got {
			if c.Value == snap.ID && c.Name == "tools-1.0" && c.Usable {
				return
			}
		}
		t.Errorf("%s: %+v, %v; want tools-1.0 by its id", what, got, err)
	}
	got, err := cat.ListImages(ctx, admin, environment.ImagesRequest{Environment: v.ID})
	has("the saved environment", got, err)
	got, err = cat.ListImages(ctx, admin, environment.ImagesRequest{Driver: "daytona", Config: map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey()}, Match: "TOOLS"})
	has("an unsaved config without its snapshot", got, err)

	if _, err := cat.ListImages(ctx, board, environment.ImagesRequest{Environment: v.ID}); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("a board member lists images: %v, want ErrDenied", err)
	}
	const wrong = "dtn-not-the-key-0123456789"
	_, err = cat.ListImages(ctx, admin, environment.ImagesRequest{Driver: "daytona", Config: map[string]any{"api_url": srv.URL(), "api_key": wrong}})
	if !errors.Is(err, drivers.ErrAuth) || strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "driver daytona") {
		t.Errorf("a wrong key: %v, want ErrAuth naming the driver, without the key", err)
	}
	fv, err := cat.Create(ctx, admin, environment.CreateRequest{Name: "box", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.ListImages(ctx, admin, environment.ImagesRequest{Environment: fv.ID}); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("the fake lists images: %v, want ErrUnsupported", err)
	}
	if _, err := cat.ListImages(ctx, admin, environment.ImagesRequest{}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("a request naming nothing: %v, want ErrInvalid", err)
	}
}
