package testenv

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Docker returns a client of the Docker engine that the environment points
// at (DOCKER_HOST, else the default socket, as the Docker CLI does), with API
// version negotiation, after a successful ping. An engine that cannot be
// reached ends the test through Missing. The client is closed at cleanup.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		Missing(t, "Docker engine", "install docker.io and start dockerd, or set DOCKER_HOST", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		_ = cli.Close()
		Missing(t, "Docker engine", "install docker.io and start dockerd, or set DOCKER_HOST", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// RemoveContainersAtCleanup registers a cleanup that force-removes every
// container (running or not) carrying the label key=value, so that a test
// leaves none behind even when it fails half-way.
func RemoveContainersAtCleanup(t testing.TB, cli *client.Client, key, value string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", key+"="+value))})
		if err != nil {
			t.Errorf("testenv: listing test containers: %v", err)
			return
		}
		for _, c := range list {
			err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !cerrdefs.IsNotFound(err) && !isRemovalInProgress(err) {
				t.Errorf("testenv: removing test container %s: %v", c.ID, err)
			}
		}
	})
}

// RemoveImageAtCleanup registers a cleanup that removes the image ref (an
// image ID, "repo@sha256:..." or "repo:tag") with all its tags. An image that
// is already gone is fine. Cleanups run last-registered first: register the
// image removal before the container removal, so that the containers using
// the image are gone when it runs.
func RemoveImageAtCleanup(t testing.TB, cli *client.Client, ref string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		id := ref
		if ins, err := cli.ImageInspect(ctx, ref); err == nil {
			id = ins.ID
		} else if cerrdefs.IsNotFound(err) {
			return
		}
		_, err := cli.ImageRemove(ctx, id, image.RemoveOptions{Force: true, PruneChildren: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("testenv: removing test image %s: %v", ref, err)
		}
	})
}

// isRemovalInProgress reports the engine's conflict answer to a removal that
// another caller has already started.
func isRemovalInProgress(err error) bool { return cerrdefs.IsConflict(err) }

// RemoveImagesAtCleanup registers a cleanup that force-removes every image
// carrying the label key=value (for example images committed from a test's
// containers).
func RemoveImagesAtCleanup(t testing.TB, cli *client.Client, key, value string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		list, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", key+"="+value))})
		if err != nil {
			t.Errorf("testenv: listing test images: %v", err)
			return
		}
		for _, im := range list {
			_, err := cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
				t.Errorf("testenv: removing test image %s: %v", im.ID, err)
			}
		}
	})
}

// RemoveRegistryImagesAtCleanup registers a cleanup that force-removes every
// image the engine holds under a repository of the registry host (for
// example a test's StartRegistry Host): whatever the test pulled from it.
func RemoveRegistryImagesAtCleanup(t testing.TB, cli *client.Client, host string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		list, err := cli.ImageList(ctx, image.ListOptions{All: true})
		if err != nil {
			t.Errorf("testenv: listing images: %v", err)
			return
		}
		for _, im := range list {
			if !slices.ContainsFunc(append(slices.Clone(im.RepoTags), im.RepoDigests...), func(r string) bool {
				return strings.HasPrefix(r, host+"/")
			}) {
				continue
			}
			_, err := cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
				t.Errorf("testenv: removing test image %s: %v", im.ID, err)
			}
		}
	})
}
