package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// loadedImage is the printed form of envctl image load.
type loadedImage struct {
	// Reference is the pinned reference to put in a Docker
	// environment's image field.
	Reference string `json:"reference"`
	// Digest is the manifest digest, "sha256:…".
	Digest string `json:"digest"`
	// Engine is the Docker engine that holds the image now.
	Engine string `json:"engine"`
}

// runImageLoad is envctl image load FILE.tar: it puts an image saved with
// `docker save` into a Docker engine under a pinned reference, for an
// engine that reaches no registry. It serves the image from a registry of
// its own on 127.0.0.1 (which Docker pulls from over plain HTTP by
// default), has the engine pull it by digest, and stops the registry: the
// engine then holds the image with the repo digest the reference names,
// and a Docker environment with that image and the default pull policy
// (missing) never asks a registry for it. The port in the reference is the
// registry's, which is gone once the command ends; the reference only
// names the engine's copy.
func runImageLoad(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("image load", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	repo := fs.String("name", "", "the repository name to load it as (default: the archive's first tag, else berth/loaded)")
	engine := fs.String("engine", "", "the Docker engine (default: DOCKER_HOST, else the local socket)")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprint(g.stderr, imageUsage)
		return errUsage
	}
	file := pos[0]
	opener := func() (io.ReadCloser, error) { return os.Open(file) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return fmt.Errorf("image load %s: not an archive of `docker save` (no readable manifest.json): %w", file, err)
	}
	if len(manifest) != 1 {
		return fmt.Errorf("image load %s: the archive holds %d images; save one image per archive", file, len(manifest))
	}
	img, err := tarball.Image(opener, nil)
	if err != nil {
		return fmt.Errorf("image load %s: %w", file, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("image load %s: %w", file, err)
	}
	path := *repo
	if path == "" {
		path = "berth/loaded"
		if tags := manifest[0].RepoTags; len(tags) > 0 {
			if t, err := name.NewTag(tags[0]); err == nil {
				path = t.RepositoryStr()
			}
		}
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if *engine != "" {
		opts = append(opts, client.WithHost(*engine))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return fmt.Errorf("image load: Docker engine: %w", err)
	}
	defer cli.Close()

	// The registry lives for this command only, on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("image load: a registry on 127.0.0.1: %w", err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	host := ln.Addr().String()
	tag, err := name.NewTag(host+"/"+path+":loaded", name.Insecure)
	if err != nil {
		return fmt.Errorf("image load: name %q: %w", path, err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("image load %s: serving it on %s: %w", file, host, err)
	}
	ref := host + "/" + path + "@" + digest.String()
	fmt.Fprintf(g.stderr, "envctl: the engine pulls %s from a registry on %s that lives for this command\n", ref, host)
	if err := pullToEngine(ctx, cli, ref); err != nil {
		return fmt.Errorf("image load %s: the engine %s could not pull it: %w", file, cli.DaemonHost(), err)
	}
	out := loadedImage{Reference: ref, Digest: digest.String(), Engine: cli.DaemonHost()}
	if g.json {
		return writeJSON(g.stdout, out)
	}
	fmt.Fprintln(g.stdout, out.Reference)
	fmt.Fprintf(g.stderr, "envctl: loaded into %s; use it as a Docker environment's image (the default pull policy, missing, keeps using the engine's copy)\n", out.Engine)
	return nil
}

// pullToEngine has the engine pull ref, reading its progress stream to the
// end, where the engine reports failures.
func pullToEngine(ctx context.Context, cli *client.Client, ref string) error {
	rc, err := cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading the engine's progress: %w", err)
		}
		if m.Error != "" {
			return errors.New(strings.TrimSpace(m.Error))
		}
	}
}
