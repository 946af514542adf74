package berth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/templates"
)

const setupToken = "setup-token-7f3a91"

// Issue 30 on the real Docker engine: a scripted setup from the busybox
// test image writes a file and runs a command (which reads a secret env
// value at exec time); berth captures, destroys the setup container with
// proof and promotes; a new lease sees both files, and the secret is in
// neither the image's environment nor the session's records. The same
// script again is answered with the template: no container is created.
func TestScriptedSetupOnDocker(t *testing.T) {
	ctx := context.Background()
	cli, img, run := dockerRig(t)
	testenv.RemoveImagesAtCleanup(t, cli, "test.berth/run", run)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "setup-docker", Driver: "docker", Config: map[string]any{
		"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run},
		"env": map[string]any{"SETUP_TOKEN": setupToken}}})
	if err != nil {
		t.Fatal(err)
	}
	script := `{"steps": [
		{"write": {"path": "/opt/tools/motd", "mode": "0640", "content": "made by setup\n"}},
		{"run": ["sh", "-c", "test \"$SETUP_TOKEN\" = ` + setupToken + ` && echo token-seen > /opt/tools/token-check && echo built"]}
	]}`
	svc := sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: env.ID, Name: "tools", Script: strings.NewReader(script), Promote: true})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if ses.State != templates.SessionPromoted || ses.LeaseCleanup != string("confirmed") {
		t.Fatalf("session %+v", ses)
	}
	if n := containers(t, cli, "berth.lease="+ses.Lease); n != 0 {
		t.Errorf("%d containers of the setup lease left", n)
	}
	tpl, err := svc.Get(ctx, tplOps, ses.Template)
	if err != nil || tpl.State != templates.StateActive {
		t.Fatalf("template %+v, %v", tpl, err)
	}
	imgInfo, err := cli.ImageInspect(ctx, tpl.Identity[strings.Index(tpl.Identity, "@")+1:])
	if err != nil {
		t.Fatalf("inspect the template image: %v", err)
	}
	if imgInfo.Config != nil && strings.Contains(strings.Join(imgInfo.Config.Env, " "), setupToken) {
		t.Errorf("the template image's environment holds the secret: %v", imgInfo.Config.Env)
	}
	events, err := svc.Events(ctx, tplOps, ses.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if strings.Contains(e.Message, setupToken) {
			t.Errorf("event %d holds the secret: %q", e.Seq, e.Message)
		}
	}

	h, err := sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "ls -l /opt/tools/motd | cut -c1-10; cat /opt/tools/motd /opt/tools/token-check"}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "-rw-r-----\nmade by setup\ntoken-seen\n" {
		t.Errorf("a new lease reads %q (exit %v, %v)", res.Stdout, res, err)
	}
	if h.Lease().Labels["berth.template-id"] != tpl.ID {
		t.Errorf("new lease labels %v, want template %s", h.Lease().Labels, tpl.ID)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}

	since := time.Now()
	again, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: env.ID, Name: "tools", Script: strings.NewReader(script)})
	if err != nil || !again.Reused || again.Template != tpl.ID || again.Lease != "" {
		t.Errorf("the same script again: %+v, %v", again, err)
	}
	if n := creates(t, cli, run, since); n != 0 {
		t.Errorf("the same script again created %d containers", n)
	}
	if n := creates(t, cli, run, ses.CreatedAt.Add(-time.Second)); n < 2 {
		t.Errorf("the engine reports %d container creates since the first setup, want at least 2 (setup, lease): the check cannot see them", n)
	}
}

// creates counts the engine's container create events of containers
// labelled test.berth/run=run since since.
func creates(t *testing.T, cli *client.Client, run string, since time.Time) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, errs := cli.Events(ctx, events.ListOptions{
		Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()), Until: fmt.Sprint(time.Now().Add(time.Second).Unix()),
		Filters: filters.NewArgs(filters.Arg("type", "container"), filters.Arg("event", "create"), filters.Arg("label", "test.berth/run="+run)),
	})
	n := 0
	for {
		select {
		case <-msgs:
			n++
		case err := <-errs:
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("docker events: %v", err)
			}
			return n
		}
	}
}

// containers counts the containers (running or not) carrying label.
func containers(t *testing.T, cli *client.Client, label string) int {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}
